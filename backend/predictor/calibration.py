"""A calibrated upper quantile beside the mean: held-out residual ratios per load band.

Most of the live TPOT error cannot be removed (the label averages a whole decode that later
arrivals slow down, issue 17), so the service says how uncertain a prediction is instead: the
p90 is the mean prediction times the 90th percentile of ``actual / predicted`` on the model's
held-out rows, per band of load (requests running + waiting on the pod). Held-out rows, not
training rows: boosted trees fit their training rows more tightly than new ones, so factors
from training residuals would under-cover. Bands because the spread grows with the batch: one
pool-wide factor over-covers an idle pod and under-covers a saturated one.

Pure numpy; stored in the model's artifact header, so it is served with the active version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BANDS: Final = 4
"""Load bands (equal-count on the held-out rows); fewer when rows are scarce."""
MIN_ROWS_PER_BAND: Final = 25
"""A 90th percentile from fewer rows is mostly noise."""
LOAD_COLUMNS: Final = ("num_request_running", "num_request_waiting")


@dataclass(frozen=True)
class QuantileCalibration:
    quantile: float
    edges: tuple[float, ...]
    """Upper load bounds between bands (len(factors) - 1 of them, ascending)."""
    factors: tuple[float, ...]
    """Per band: the quantile of actual / predicted on the held-out rows (>= 1 is typical)."""
    n: int
    """Held-out rows the factors come from."""

    def factor(self, load: npt.ArrayLike) -> FloatArray:
        """The multiplier for each row's load (loads past the last edge take the top band)."""
        band = np.searchsorted(np.asarray(self.edges), np.asarray(load, dtype=np.float64))
        return np.asarray(self.factors, dtype=np.float64)[band]

    def to_dict(self) -> dict[str, Any]:
        return {
            "quantile": self.quantile,
            "edges": list(self.edges),
            "factors": list(self.factors),
            "n": self.n,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QuantileCalibration:
        return cls(
            float(data["quantile"]),
            tuple(float(x) for x in data["edges"]),
            tuple(float(x) for x in data["factors"]),
            int(data["n"]),
        )


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
    quantile: float = 0.9,
    bands: int = BANDS,
    min_rows_per_band: int = MIN_ROWS_PER_BAND,
) -> QuantileCalibration | None:
    """Factors from held-out rows; None with fewer than ``min_rows_per_band`` usable rows."""
    if not 0.0 < quantile < 1.0:
        raise ValueError("quantile must be in (0, 1)")
    lo = np.asarray(load, dtype=np.float64).reshape(-1)
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    ok = np.isfinite(lo) & np.isfinite(true) & (true > 0) & np.isfinite(pred) & (pred > 0)
    lo, ratio = lo[ok], true[ok] / pred[ok]
    k = min(bands, lo.size // min_rows_per_band)
    if k < 1:
        return None
    # Equal-count bands; loads are integers, so duplicate edges collapse into one band.
    cuts = np.unique(np.quantile(lo, np.arange(1, k) / k)) if k > 1 else np.empty(0)
    band = np.searchsorted(cuts, lo)
    counts = np.bincount(band, minlength=len(cuts) + 1)
    # Group adjacent bands until each group has enough rows for its own quantile; a thin last
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
    factors = tuple(float(np.quantile(ratio[np.isin(band, g)], quantile)) for g in groups)
    return QuantileCalibration(quantile, edges, factors, int(lo.size))
