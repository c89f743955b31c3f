"""Residual calibration: what the served mean is corrected by, and how far actuals spread around it.

Per band of load (requests running + waiting on the pod), a model version carries

- a **correction**: the served mean is the model's prediction times the band's median of
  ``actual / prediction``, so that half of the actuals land above it and half below (median
  bias ~0 in every band);
- the **spread**: quantiles of ``actual / served mean`` in the band. The p90 served beside the
  mean is the mean times the band's 90th percentile; the chance that a request misses an SLO
  is the share of the band's ratios above ``SLO / served mean`` (``meet_probability``, used by
  the saturation level).

Two sources, in order of preference (``calibrate``):

1. **Live rows** (issue 17): the newest samples that were routed by a prediction (they carry
   ``predicted_ms``). They include what no held-out row shows: the router picks the pod with
   the lowest prediction, so the chosen pod's prediction is biased low (a winner's curse), and
   live load is busier and newer than the bucket-capped window. The ratio fitted is the actual
   latency over the *active version's own prediction* of the row (the caller recomputes it),
   not over the ``predicted_ms`` served: those were served by whichever version was active at
   the time, each with its own correction, which a sample does not record. Undoing them with
   the active version's correction made the fit an integral loop over several versions' lag,
   and it diverged in the simulator (TPOT MAPE 50 % -> 1,700 % on Azure code at load 4). The
   active version routed most of the recent rows (its predecessors were close to it) and is
   out of sample on the rows newer than its training; the correction is applied to the
   candidate on the assumption that it errs like its predecessor (they are trained on nearly
   the same window), and every round refits it.
2. **Held-out rows** of the training window, when too few live rows carry a prediction (a new
   pool, a router that sends none). There is no selection in them and the model is unbiased on
   them by construction, so the correction is 1 (the mean is left as trained) and only the
   spread is taken.

Pure numpy; stored in the model's artifact header, so it is served with the active version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Source = Literal["live", "held_out"]

BANDS: Final = 4
"""Load bands on held-out rows (equal-count); fewer when rows are scarce."""
MIN_ROWS_PER_BAND: Final = 25
"""A 90th percentile from fewer rows is mostly noise."""
LIVE_BANDS: Final = 8
"""Load bands on live rows: the bias of a winner's curse changes with load faster than the
spread does, and live rows are plentiful (up to ``LIVE_ROWS``)."""
LIVE_MIN_ROWS_PER_BAND: Final = 50
LIVE_ROWS: Final = 2000
"""The newest rows with a prediction that a live calibration is fitted on."""
MIN_LIVE_ROWS: Final = 200
"""Below this many live rows the held-out rows are used instead."""
MIN_MOVED_ROWS: Final = 10
"""Fewest rows (held out from the version's training) behind a band's ``moved``; fewer, none."""
POINTS: Final = 32
"""Quantiles of the spread kept per band, at levels (k + 0.5) / POINTS."""
UPPER_QUANTILE: Final = 0.9
LOAD_COLUMNS: Final = ("num_request_running", "num_request_waiting")


@dataclass(frozen=True)
class Calibration:
    quantile: float
    """The upper quantile served beside the mean (``upper``)."""
    edges: tuple[float, ...]
    """Upper load bounds between bands (len(correction) - 1 of them, ascending)."""
    correction: tuple[float, ...]
    """Per band: served mean = model prediction x this (1 for a held-out calibration)."""
    levels: tuple[float, ...]
    """Probability levels of ``points`` (ascending, in (0, 1))."""
    points: tuple[tuple[float, ...], ...]
    """Per band: quantiles of actual / served mean at ``levels`` (ascending)."""
    n: int
    """Rows the calibration comes from."""
    source: Source = "held_out"

    # Arrays built once per calibration (a served version's is reused for every prediction):
    # the hot path then costs a searchsorted and two gathers.
    @cached_property
    def _edges(self) -> FloatArray:
        return np.asarray(self.edges, dtype=np.float64)

    @cached_property
    def _correction(self) -> FloatArray:
        return np.asarray(self.correction, dtype=np.float64)

    @cached_property
    def _upper(self) -> FloatArray:
        return self._quantile_per_band(self.quantile)

    def _quantile_per_band(self, q: float) -> FloatArray:
        return np.asarray([np.interp(q, self.levels, pts) for pts in self.points])

    def band(self, load: npt.ArrayLike) -> npt.NDArray[np.intp]:
        """Each row's band (loads past the last edge take the top band)."""
        return np.searchsorted(self._edges, np.asarray(load, dtype=np.float64))

    def mean_factor(self, load: npt.ArrayLike) -> FloatArray:
        """Model prediction -> served mean, per row."""
        return self._correction[self.band(load)]

    def upper(self, load: npt.ArrayLike, quantile: float | None = None) -> FloatArray:
        """Served mean -> its ``quantile`` (default: the calibrated one), per row."""
        per_band = self._upper if quantile is None else self._quantile_per_band(quantile)
        return per_band[self.band(load)]

    def at(self, load: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
        """(``mean_factor``, ``upper``) per row, banding the rows once (the serving path)."""
        band = self.band(load)
        return self._correction[band], self._upper[band]

    def factor(self, load: npt.ArrayLike) -> FloatArray:
        """Model prediction -> the served upper quantile, per row."""
        return self.mean_factor(load) * self.upper(load)

    def below(self, load: npt.ArrayLike, served: npt.ArrayLike, limit: float) -> FloatArray:
        """P(actual <= ``limit``) per row whose served mean is ``served``: the band's share of
        ratios at or under ``limit / served``. At or under, as the 0/1 rule (``served <=
        limit``, the chain's tier) it reduces to when the spread is nil; a non-finite or
        non-positive mean never meets."""
        mean = np.asarray(served, dtype=np.float64).reshape(-1)
        ok = np.isfinite(mean) & (mean > 0)
        x = np.where(ok, limit / np.where(ok, mean, 1.0), -np.inf)
        pts = np.asarray(self.points, dtype=np.float64)[self.band(load).reshape(-1)]
        below = (pts <= x[:, None]).sum(axis=1)
        # The step CDF of the quantile points: between the k-th and (k+1)-th point it reads
        # halfway between their levels (with uniform levels, k / POINTS: the empirical share).
        lv = np.asarray(self.levels, dtype=np.float64)
        steps = np.concatenate(([0.0], (lv[:-1] + lv[1:]) / 2.0, [1.0]))
        return np.where(ok, steps[below], 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "quantile": self.quantile,
            "edges": list(self.edges),
            "correction": list(self.correction),
            "levels": list(self.levels),
            "points": [list(p) for p in self.points],
            "n": self.n,
            "source": self.source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        q = float(data["quantile"])
        edges = tuple(float(x) for x in data["edges"])
        if "points" not in data:
            # An artifact from before live calibration: one p90 factor per band, the mean as
            # trained. Its spread is known only at the median (1) and the p90.
            factors = tuple(float(x) for x in data["factors"])
            return cls(
                q,
                edges,
                tuple(1.0 for _ in factors),
                (0.5, q),
                tuple((1.0, max(1.0, f)) for f in factors),
                int(data["n"]),
            )
        return cls(
            q,
            edges,
            tuple(float(x) for x in data["correction"]),
            tuple(float(x) for x in data["levels"]),
            tuple(tuple(float(x) for x in p) for p in data["points"]),
            int(data["n"]),
            "live" if data.get("source") == "live" else "held_out",
        )


# Artifacts and callers written before the correction was added name it this way.
QuantileCalibration = Calibration


def row_load(X: npt.ArrayLike, feature_names: tuple[str, ...]) -> FloatArray:
    """Requests running + waiting per row of a feature matrix (both targets carry them)."""
    m = np.asarray(X, dtype=np.float64)
    return sum((m[:, feature_names.index(c)] for c in LOAD_COLUMNS), np.zeros(m.shape[0]))


def column_load(cols: Mapping[str, npt.ArrayLike]) -> FloatArray:
    """Requests running + waiting per row of wire columns."""
    return np.asarray(cols["num_request_running"], dtype=np.float64) + np.asarray(
        cols["num_request_waiting"], dtype=np.float64
    )


def fit_calibration(
    load: npt.ArrayLike,
    actual: npt.ArrayLike,
    predicted: npt.ArrayLike,
    quantile: float = UPPER_QUANTILE,
    bands: int = BANDS,
    min_rows_per_band: int = MIN_ROWS_PER_BAND,
    *,
    correct: bool = False,
    source: Source = "held_out",
    served: npt.ArrayLike | None = None,
    typical: npt.ArrayLike | None = None,
    moved: npt.ArrayLike | None = None,
) -> Calibration | None:
    """Per-band spread (and with ``correct``, the median correction) of ``actual / predicted``;
    None with fewer than ``min_rows_per_band`` usable rows. With ``served`` (what each row's
    router was told) the spread's shape is taken from ``actual / served`` instead, about its
    band median. With ``typical`` (a mask), only those rows set the correction and the median
    the spread is taken about; the spread's quantiles are over every row. With ``moved`` (per
    row, the version being calibrated's prediction over ``predicted``; NaN where unknown), the
    correction is the band's median ratio less half (in log terms) of what that version has
    already moved by (``LiveRows``), from at least ``MIN_MOVED_ROWS`` rows of the band."""
    if not 0.0 < quantile < 1.0:
        raise ValueError("quantile must be in (0, 1)")
    lo = np.asarray(load, dtype=np.float64).reshape(-1)
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    ok = np.isfinite(lo) & np.isfinite(true) & (true > 0) & np.isfinite(pred) & (pred > 0)
    told = pred if served is None else np.asarray(served, dtype=np.float64).reshape(-1)
    ok &= np.isfinite(told) & (told > 0)
    usual = np.ones(ok.shape, np.bool_) if typical is None else np.asarray(typical, np.bool_)
    lo, ratio, seen = lo[ok], true[ok] / pred[ok], true[ok] / told[ok]
    usual = usual.reshape(-1)[ok]
    shifted = None if moved is None else np.asarray(moved, dtype=np.float64).reshape(-1)[ok]
    k = min(bands, int(usual.sum()) // min_rows_per_band)
    if k < 1:
        return None
    # Equal-count bands of the typical rows (the atypical ones fall into them): loads are
    # integers, so duplicate edges collapse into one band.
    cuts = np.unique(np.quantile(lo[usual], np.arange(1, k) / k)) if k > 1 else np.empty(0)
    band = np.searchsorted(cuts, lo)
    counts = np.bincount(band[usual], minlength=len(cuts) + 1)
    # Group adjacent bands until each group has enough rows for its own quantiles; a thin last
    # group joins the one before it.
    groups: list[list[int]] = [[]]
    for b in range(len(counts)):
        groups[-1].append(b)
        if sum(int(counts[i]) for i in groups[-1]) >= min_rows_per_band:
            groups.append([])
    tail = groups.pop()
    if tail:
        groups[-1].extend(tail)
    edges = tuple(float(cuts[g[-1]]) for g in groups[:-1])
    levels = (np.arange(POINTS) + 0.5) / POINTS
    correction: list[float] = []
    points: list[tuple[float, ...]] = []
    for g in groups:
        rows = np.isin(band, g)
        mid = rows & usual
        shift = float(np.median(ratio[mid])) if correct else 1.0
        learned = 1.0
        if correct and shifted is not None:
            step = shifted[rows]
            step = step[np.isfinite(step) & (step > 0)]
            learned = float(np.sqrt(np.median(step))) if step.size >= MIN_MOVED_ROWS else 1.0
        correction.append(shift / learned)
        spread = ratio[rows] / shift if served is None else seen[rows] / float(np.median(seen[mid]))
        points.append(tuple(float(x) for x in np.quantile(spread, levels)))
    return Calibration(
        quantile,
        edges,
        tuple(correction),
        tuple(float(x) for x in levels),
        tuple(points),
        int(lo.size),
        source,
    )


@dataclass(frozen=True)
class LiveRows:
    """Rows that were routed by a prediction, newest last."""

    load: FloatArray
    actual: FloatArray
    predicted: FloatArray
    """The model's own prediction of each row (before any correction); NaN or <= 0 for a row
    that was not routed by a prediction."""
    served: FloatArray | None = None
    """What the router was told for each row, when ``predicted`` is not it (a stand-in
    recomputed by the active version): the spread is then taken from the served predictions,
    out of sample, rather than from the stand-in's, which trained on most of these rows."""
    typical: npt.NDArray[np.bool_] | None = None
    """Rows the correction is fitted on (None: every row); the rest, the outliers the trainer
    keeps out of training, widen the spread only. The p90 must reach what the pods did to
    every routed request; the mean keeps describing the usual one, as the model does."""
    moved: FloatArray | None = None
    """Per row held out from the version's training, its own prediction over ``predicted`` (NaN
    on the rows it trained on, which it fits too closely to tell; None: 1, the same version).
    The rows' ratio to the serving versions' predictions carries the winner's curse of routing
    on them, which the next version will have too, and their lag behind a change, such as a
    growing burst, which a version trained on these rows has already learned. Counted twice, a
    burst read 25 % optimistic made the next version read the next burst pessimistic; the
    correction is divided by the square root of this part: half of it in log terms, since
    taking all of it off read Azure code's top load deciles 13 % optimistic (the winner's curse
    is in it too; docs/results/live_correction_lag_rule.txt)."""


def calibrate(
    held_out: tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike] | None,
    live: LiveRows | None,
    quantile: float = UPPER_QUANTILE,
) -> Calibration | None:
    """A version's calibration: from the newest ``LIVE_ROWS`` live rows when at least
    ``MIN_LIVE_ROWS`` carry a prediction, else from ``held_out`` = (load, actual, the version's
    own prediction), else None."""
    if live is not None:
        pred = np.asarray(live.predicted, dtype=np.float64).reshape(-1)
        routed = np.isfinite(pred) & (pred > 0)
        usual = routed if live.typical is None else routed & np.asarray(live.typical).reshape(-1)
        # The newest LIVE_ROWS typical rows, and the atypical ones among them.
        newest = np.flatnonzero(usual)[-LIVE_ROWS:]
        has = np.flatnonzero(routed)
        has = has[has >= newest[0]] if newest.size else newest
        if newest.size >= MIN_LIVE_ROWS:
            fitted = fit_calibration(
                np.asarray(live.load, dtype=np.float64).reshape(-1)[has],
                np.asarray(live.actual, dtype=np.float64).reshape(-1)[has],
                pred[has],
                quantile,
                LIVE_BANDS,
                LIVE_MIN_ROWS_PER_BAND,
                correct=True,
                source="live",
                served=None if live.served is None else np.asarray(live.served)[has],
                typical=None if live.typical is None else np.asarray(live.typical)[has],
                moved=None if live.moved is None else np.asarray(live.moved)[has],
            )
            if fitted is not None:
                return fitted
    if held_out is None:
        return None
    return fit_calibration(*held_out, quantile)


def meet_probability(
    load: npt.ArrayLike,
    ttft_ms: npt.ArrayLike,
    tpot_ms: npt.ArrayLike,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    ttft_cal: Calibration | None,
    tpot_cal: Calibration | None,
) -> FloatArray:
    """P(a request meets both SLOs) per row, from the served means and each target's spread at
    the row's load. A target without a calibration counts by the 0/1 rule (mean <= SLO). The two
    ratios are taken as independent: TTFT is set by the queue ahead at arrival and TPOT by the
    batch over the whole decode, and a product is what the chain's AND of two tiers needs.
    At the SLO counts as meeting it (``Calibration.below``), as the chain's tier counts it."""
    ttft = np.asarray(ttft_ms, dtype=np.float64).reshape(-1)
    tpot = np.asarray(tpot_ms, dtype=np.float64).reshape(-1)
    lo = np.asarray(load, dtype=np.float64).reshape(-1)
    p = (np.isfinite(ttft) & np.isfinite(tpot)).astype(np.float64)
    for mean, slo, cal in ((ttft, ttft_slo_ms, ttft_cal), (tpot, tpot_slo_ms, tpot_cal)):
        if slo is None:
            continue
        p *= cal.below(lo, mean, slo) if cal is not None else (mean <= slo).astype(np.float64)
    return p
