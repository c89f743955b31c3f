"""Train one target's model on a window of samples and score it on the held-out rows. No I/O."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.predictor.calibration import UPPER_QUANTILE, column_load, fit_calibration, row_load
from backend.predictor.evaluation import Metrics, evaluate
from backend.predictor.features import (
    PREFILL_RATE_COLUMN,
    Columns,
    Target,
    base_feature_names,
    class_vocabulary,
    feature_matrix,
    feature_names,
    measure_prefill_rates,
    pod_class_codes,
    prefill_rate_column,
)
from backend.predictor.regressors import Kind, LatencyModel, LossObjective, TrainParams, make_model

__all__ = ["UPPER_QUANTILE", "TrainParams", "TrainResult", "train_target"]


@dataclass(frozen=True)
class TrainResult:
    target: Target
    model: LatencyModel
    metrics: Metrics | None
    """On the held-out rows; None when there were none."""
    n_train: int
    n_test: int
    n_dropped: int
    """Rows without a usable label for this target (e.g. TPOT-only samples when training TTFT)."""
    train_seconds: float
    """Wall time of the whole call: features, fit and evaluation."""


def train_target(
    target: Target,
    cols: Columns,
    y: npt.ArrayLike,
    is_test: npt.ArrayLike,
    *,
    kind: Kind = "hybrid",
    objective: LossObjective = "mean",
    quantile: float = 0.9,
    params: TrainParams | None = None,
) -> TrainResult:
    """Fit ``kind`` for ``target`` on the rows not in ``is_test``; evaluate on those that are.

    A row counts only if its label is finite and > 0: upstream sends a TTFT sample with
    ``actual_tpot_ms = 0`` and vice versa, so each target sees only its own samples.
    """
    started = time.perf_counter()
    classes = class_vocabulary(cols.get("pod_class"))
    labels = np.asarray(y, dtype=np.float64).reshape(-1)
    held_out = np.asarray(is_test, dtype=bool).reshape(-1)
    n = int(np.shape(cols["input_token_length"])[0])
    if not labels.shape[0] == held_out.shape[0] == n:
        raise ValueError(
            f"{n} feature rows, {labels.shape[0]} labels, {held_out.shape[0]} test flags"
        )
    # Measured on the training rows only, so the held-out score sees what serving will.
    rates = measure_prefill_rates(cols, labels, ~held_out) if target == "ttft" else {}
    X = feature_matrix(target, model_columns(cols, classes, rates), kind)
    with np.errstate(invalid="ignore"):
        usable = np.isfinite(labels) & (labels > 0) & np.isfinite(X).all(axis=1)
    train, test = usable & ~held_out, usable & held_out
    if not train.any():
        raise ValueError(f"no usable {target} training rows (labels must be finite and > 0)")
    model = make_model(
        kind,
        feature_names(target, kind),
        base_features=base_feature_names(target),
        objective=objective,
        quantile=quantile,
        params=params,
    )
    model.classes = classes
    model.prefill_rates = rates
    model.fit(X[train], labels[train])
    metrics = None
    if test.any():
        scored_quantile = quantile if objective == "quantile" else None
        predicted = model.predict(X[test])
        metrics = evaluate(labels[test], predicted, quantile=scored_quantile)
        if objective == "mean":
            # The spread around the mean from the held-out rows: the fallback of a calibration
            # from live rows, which the training round fits when the window carries enough
            # (backend/predictor/gate.py).
            model.calibration = fit_calibration(
                row_load(X[test], model.feature_names), labels[test], predicted, UPPER_QUANTILE
            )
    return TrainResult(
        target=target,
        model=model,
        metrics=metrics,
        n_train=int(train.sum()),
        n_test=int(test.sum()),
        n_dropped=int((~usable).sum()),
        train_seconds=time.perf_counter() - started,
    )


def model_columns(
    cols: Columns, classes: tuple[str, ...], rates: dict[str, float]
) -> dict[str, Any]:
    """`cols` plus what a model adds to them from its training window: `pod_class_code` by its
    class vocabulary and each row's measured prefill rate by its class."""
    n = int(np.shape(cols["input_token_length"])[0])
    pod_class = cols.get("pod_class")
    return {
        **cols,
        "pod_class_code": pod_class_codes(pod_class, classes, n),
        PREFILL_RATE_COLUMN: prefill_rate_column(pod_class, rates, n),
    }


def predict_columns(model: LatencyModel, target: Target, cols: Columns) -> npt.NDArray[Any]:
    """Predict wire columns with a fitted model: pod classes by the model's own vocabulary."""
    columns = model_columns(cols, model.classes, model.prefill_rates)
    return model.predict(feature_matrix(target, columns, model.kind))


def serve_columns(model: LatencyModel, target: Target, cols: Columns) -> npt.NDArray[np.float64]:
    """The mean served for wire columns: the model's prediction times its calibration's
    correction at each row's load (the prediction alone without a calibration). What the
    router is told, and so what the samples' ``predicted_ms`` carry back."""
    raw = np.asarray(predict_columns(model, target, cols), dtype=np.float64)
    if model.calibration is None:
        return raw
    return raw * model.calibration.mean_factor(column_load(cols))
