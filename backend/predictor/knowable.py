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
WINDOW_ROWS: Final = 2000
"""The newest rows per (pool, target) a window keeps (as the live calibration reads)."""


@dataclass(frozen=True)
class AgainstFloor:
    """The live predictions' and the floor's error on the same requests."""

    live: Metrics
    floor: Metrics

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
    min_rows: int = MIN_ROWS,
) -> AgainstFloor | None:
    """Both errors over the rows with a positive finite actual, prediction and floor; None with
    fewer than ``min_rows`` of them (a request routed without a prediction, or not sampled for
    the floor, says nothing of the comparison)."""
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    best = np.asarray(floor, dtype=np.float64).reshape(-1)
    if not true.shape == pred.shape == best.shape:
        raise ValueError("actual, predicted and floor need one value per row each")
    keep = np.ones(true.shape, dtype=np.bool_)
    for column in (true, pred, best):
        keep &= np.isfinite(column) & (column > 0)
    if int(keep.sum()) < min_rows:
        return None
    return AgainstFloor(evaluate(true[keep], pred[keep]), evaluate(true[keep], best[keep]))


class FloorWindow:
    """The newest ``rows`` (actual, predicted, floor) triples per (pool, target), in memory.

    Written by one thread (the demo's feeder) and read by request threads, hence the lock."""

    def __init__(self, rows: int = WINDOW_ROWS) -> None:
        if rows < 1:
            raise ValueError("rows must be >= 1")
        self.rows = rows
        self._lock = threading.Lock()
        self._data: dict[tuple[str, Target], deque[tuple[float, float, float]]] = {}

    def add(self, pool: str, target: Target, actual: float, predicted: float, floor: float) -> None:
        """One observed request; one without a prediction or a floor is not kept."""
        if not all(np.isfinite(x) and x > 0 for x in (actual, predicted, floor)):
            return
        with self._lock:
            kept = self._data.get((pool, target))
            if kept is None:
                kept = self._data[(pool, target)] = deque(maxlen=self.rows)
            kept.append((actual, predicted, floor))

    def summary(self, pool: str, target: Target) -> AgainstFloor | None:
        with self._lock:
            kept = list(self._data.get((pool, target), ()))
        if not kept:
            return None
        actual, predicted, floor = np.asarray(kept, dtype=np.float64).T
        return against_floor(actual, predicted, floor)
