"""Accuracy metrics for latency predictions.

Ratios are fractions, not percent: ``mape = 0.05`` means 5 %. Rows whose true latency is not a
positive finite number carry no relative error and are left out (``n`` counts the rows used).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class Metrics:
    n: int
    """Rows scored."""
    mape: float
    """Mean absolute percentage error, as a fraction."""
    mae: float
    """Mean absolute error, in the labels' unit (ms)."""
    rmse: float
    """Root mean squared error (ms)."""
    p90_ape: float
    """90th percentile of the absolute percentage error, as a fraction."""
    median_bias: float
    """Signed median of (pred - true) / true: negative means the model under-predicts."""
    coverage: float | None = None
    """Quantile models only: share of rows with true <= predicted (target: the quantile)."""
    quantile_loss: float | None = None
    """Quantile models only: mean pinball loss at the model's quantile (ms)."""

    def as_dict(self) -> dict[str, float | int | None]:
        return dataclasses.asdict(self)


def evaluate(
    y_true: npt.ArrayLike, y_pred: npt.ArrayLike, *, quantile: float | None = None
) -> Metrics:
    """Score predictions; with ``quantile`` (quantile models) also coverage and pinball loss."""
    true = np.asarray(y_true, dtype=np.float64).reshape(-1)
    pred = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    if true.shape != pred.shape:
        raise ValueError(f"{true.size} labels but {pred.size} predictions")
    keep = np.isfinite(true) & (true > 0)
    true, pred = true[keep], pred[keep]
    if true.size == 0:
        raise ValueError("no rows with a positive finite label to score")
    error = pred - true
    relative = error / true
    coverage = loss = None
    if quantile is not None:
        coverage = float(np.mean(true <= pred))
        shortfall = true - pred
        loss = float(np.mean(np.maximum(quantile * shortfall, (quantile - 1.0) * shortfall)))
    return Metrics(
        n=int(true.size),
        mape=float(np.mean(np.abs(relative))),
        mae=float(np.mean(np.abs(error))),
        rmse=float(np.sqrt(np.mean(np.square(error)))),
        p90_ape=float(np.percentile(np.abs(relative), 90)),
        median_bias=float(np.median(relative)),
        coverage=coverage,
        quantile_loss=loss,
    )
