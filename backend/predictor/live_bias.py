"""Live bias near saturation: the router's own predictions against what happened, at high load.

The llm-d autoscaling proposal (PR #1453) calls the latency predictor "least accurate near
saturation (optimistically biased)". That is where a capacity signal or a routing decision
matters most, so the console reports the median relative error of each model version's live
predictions on the rows of the top load decile, and warns when it is optimistic (predicted
below actual).

Load is the row's own gauges (running + waiting requests on the pod when it was scheduled):
what the model saw, so "high load" is the same notion the features carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# The top load decile.
TOP_SHARE = 0.1
# Fewer rows than this in the decile say nothing about a median.
MIN_ROWS = 20
# Optimistic beyond this (predicted below actual by more than 5 %) raises the Overview warning.
OPTIMISTIC_BEYOND = -0.05


@dataclass(frozen=True)
class HighLoadBias:
    """Median of (predicted - actual) / actual over the rows at or above `load_threshold`:
    negative means the model predicted too little (optimistic)."""

    bias: float
    n: int
    load_threshold: float

    @property
    def optimistic(self) -> bool:
        return self.bias < OPTIMISTIC_BEYOND


def high_load_bias(
    actual: npt.ArrayLike,
    predicted: npt.ArrayLike,
    load: npt.ArrayLike,
    top_share: float = TOP_SHARE,
    min_rows: int = MIN_ROWS,
) -> HighLoadBias | None:
    """The median relative error in the top `top_share` of rows by load; None when there are
    too few rows. Rows without a prediction (NaN or <= 0) or without a positive latency are
    skipped before the decile is drawn, so the decile is of rows the model was judged on."""
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    level = np.asarray(load, dtype=np.float64).reshape(-1)
    keep = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0) & np.isfinite(level)
    true, pred, level = true[keep], pred[keep], level[keep]
    if true.size == 0:
        return None
    threshold = float(np.quantile(level, 1.0 - top_share))
    # Ties at the threshold all count as high load: with integer gauges a strict cut could
    # leave the decile empty (every row at load 3, say).
    top = level >= threshold
    if int(top.sum()) < min_rows:
        return None
    relative = (pred[top] - true[top]) / true[top]
    return HighLoadBias(float(np.median(relative)), int(top.sum()), threshold)


def attribute(observed_s: npt.ArrayLike, activated_s: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """For each row, the index (into `activated_s`, ascending) of the version that was active
    when the row was observed, or -1 before the first activation. A version serves from its
    activation until the next one's."""
    starts = np.asarray(activated_s, dtype=np.float64).reshape(-1)
    times = np.asarray(observed_s, dtype=np.float64).reshape(-1)
    return (np.searchsorted(starts, times, side="right") - 1).astype(np.int64)
