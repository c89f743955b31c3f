"""Live error against what was knowable: the predictions routing used, beside the present-state
floor, for samples that come from the simulator (the demo's pools).

The floor (``backend/sim/engine.py``) is the outcome of a noise-free copy of the chosen pod at
dispatch, run with no later arrivals: what a predictor that knew the pod's whole present state
exactly, and nothing of the future, would have said. A live error far above it is error the
models could remove; a live error near it is the future's (later arrivals, step noise). Only a
simulated pool has a floor: a real pod cannot be copied.

Pure: the console reads it through the demo's in-process window (``FloorWindow``), which the
demo's feeder thread fills as its simulated router observes.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from backend.predictor.evaluation import Metrics, evaluate
from backend.predictor.features import Target

MIN_ROWS: Final = 20
"""Fewer rows with a prediction and a floor say nothing about either's error."""
DECILES: Final = 10
"""Load deciles reported, from ``DECILES * MIN_ROWS`` rows on (each then has ``MIN_ROWS``)."""
WINDOW_ROWS: Final = 2000
"""The newest rows per (pool, target) a window keeps (as the live calibration reads)."""


def load_deciles(load: npt.ArrayLike, deciles: int) -> list[npt.NDArray[np.intp]]:
    """Row indices in ``deciles`` equal-sized groups by rank of the load, so that a load shared
    by many requests does not leave deciles empty. Ties are broken at random (seeded: the same
    groups every run), so that the deciles sharing one load are each a sample of it. Broken by
    request order, they were slices of time: on Azure code at load 4 a third of the requests
    find an idle pod, and the "lowest decile" was the run's first such requests, served by the
    first models (+59 % TPOT median bias there against -3 and -0.3 % in the next two deciles,
    all at load 0)."""
    level = np.asarray(load)
    tiebreak = np.random.default_rng(0).permutation(level.size)
    return np.array_split(np.lexsort((tiebreak, level)), deciles)


@dataclass(frozen=True)
class DecileError:
    """Both errors on one load decile's requests."""

    load_min: float
    load_max: float
    live: Metrics
    floor: Metrics


@dataclass(frozen=True)
class AgainstFloor:
    """The live predictions' and the floor's error on the same requests."""

    live: Metrics
    floor: Metrics
    by_decile: tuple[DecileError, ...] = ()
    """Per load decile, lowest first (empty without loads or with too few rows)."""

    @property
    def n(self) -> int:
        return self.live.n

    @property
    def ratio(self) -> float | None:
        """Live MAPE over the floor's (the issue's yardstick: 1 is all that is knowable)."""
        return self.live.mape / self.floor.mape if self.floor.mape > 0 else None


def against_floor(
    actual: npt.ArrayLike,
    predicted: npt.ArrayLike,
    floor: npt.ArrayLike,
    load: npt.ArrayLike | None = None,
    min_rows: int = MIN_ROWS,
) -> AgainstFloor | None:
    """Both errors over the rows with a positive finite actual, prediction and floor; None with
    fewer than ``min_rows`` of them (a request routed without a prediction, or not sampled for
    the floor, says nothing of the comparison). With ``load`` (each request's load when it was
    routed: running + waiting on its pod), per load decile too, from ``DECILES * min_rows``
    rows on."""
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    best = np.asarray(floor, dtype=np.float64).reshape(-1)
    level = None if load is None else np.asarray(load, dtype=np.float64).reshape(-1)
    if not true.shape == pred.shape == best.shape or (
        level is not None and level.shape != true.shape
    ):
        raise ValueError("actual, predicted, floor and load need one value per row each")
    keep = np.ones(true.shape, dtype=np.bool_)
    for column in (true, pred, best):
        keep &= np.isfinite(column) & (column > 0)
    if level is not None:
        keep &= np.isfinite(level)
    if int(keep.sum()) < min_rows:
        return None
    true, pred, best = true[keep], pred[keep], best[keep]
    by_decile: tuple[DecileError, ...] = ()
    if level is not None and true.size >= DECILES * min_rows:
        level = level[keep]
        by_decile = tuple(
            DecileError(
                float(level[g].min()),
                float(level[g].max()),
                evaluate(true[g], pred[g]),
                evaluate(true[g], best[g]),
            )
            for g in load_deciles(level, DECILES)
        )
    return AgainstFloor(evaluate(true, pred), evaluate(true, best), by_decile)


class FloorWindow:
    """The newest ``rows`` (actual, predicted, floor) triples per (pool, target), in memory.

    Written by one thread (the demo's feeder) and read by request threads, hence the lock."""

    def __init__(self, rows: int = WINDOW_ROWS) -> None:
        if rows < 1:
            raise ValueError("rows must be >= 1")
        self.rows = rows
        self._lock = threading.Lock()
        self._data: dict[tuple[str, Target], deque[tuple[float, float, float, float]]] = {}

    def add(
        self,
        pool: str,
        target: Target,
        actual: float,
        predicted: float,
        floor: float,
        load: float,
    ) -> None:
        """One observed request (``load``: running + waiting on its pod when it was routed, as
        its features carry them); one without a prediction or a floor is not kept."""
        if not all(np.isfinite(x) and x > 0 for x in (actual, predicted, floor)):
            return
        with self._lock:
            kept = self._data.get((pool, target))
            if kept is None:
                kept = self._data[(pool, target)] = deque(maxlen=self.rows)
            kept.append((actual, predicted, floor, load))

    def summary(self, pool: str, target: Target) -> AgainstFloor | None:
        with self._lock:
            kept = list(self._data.get((pool, target), ()))
        if not kept:
            return None
        actual, predicted, floor, load = np.asarray(kept, dtype=np.float64).T
        return against_floor(actual, predicted, floor, load)
