from __future__ import annotations

import numpy as np
import pytest

from backend.predictor.features import TTFT_FEATURES, UPSTREAM_TPOT_FEATURES
from backend.predictor.regressors import HybridModel, XGBoostModel
from backend.predictor.training import TrainParams, train_target
from tests.unit.predictor.synthetic import sample

FAST = TrainParams(n_estimators=20)


def test_unlabelled_rows_are_dropped_and_test_rows_held_out() -> None:
    batch = sample(600, np.random.default_rng(0))
    y = batch.ttft.copy()
    y[:100] = 0.0  # TPOT samples carry actual_ttft_ms = 0
    y[100:110] = np.nan
    y[110:115] = -3.0
    is_test = np.zeros(600, dtype=bool)
    is_test[500:] = True
    result = train_target("ttft", batch.cols, y, is_test, params=FAST)
    assert (result.n_train, result.n_test, result.n_dropped) == (385, 100, 115)
    assert result.metrics is not None and result.metrics.n == 100
    assert result.metrics.mape < 0.1
    assert result.train_seconds > 0
    assert isinstance(result.model, HybridModel)
    assert result.model.feature_names == TTFT_FEATURES


def test_no_test_rows_means_no_metrics() -> None:
    batch = sample(200, np.random.default_rng(1))
    result = train_target(
        "tpot", batch.cols, batch.tpot, np.zeros(200, dtype=bool), kind="xgboost", params=FAST
    )
    assert result.metrics is None and result.n_test == 0
    assert isinstance(result.model, XGBoostModel)
    # Upstream's model on upstream's columns.
    assert result.model.feature_names == UPSTREAM_TPOT_FEATURES


def test_quantile_objective_reports_coverage() -> None:
    batch = sample(800, np.random.default_rng(2), noise=0.1)
    is_test = np.arange(800) % 5 == 0
    result = train_target(
        "ttft", batch.cols, batch.ttft, is_test, objective="quantile", quantile=0.8
    )
    assert result.model.objective == "quantile" and result.model.quantile == 0.8
    assert result.metrics is not None and result.metrics.coverage is not None
    assert 0.6 < result.metrics.coverage < 0.95


def test_errors_name_the_problem() -> None:
    batch = sample(50, np.random.default_rng(3))
    with pytest.raises(ValueError, match="no usable ttft"):
        train_target("ttft", batch.cols, np.zeros(50), np.zeros(50, dtype=bool))
    with pytest.raises(ValueError, match="test flags"):
        train_target("ttft", batch.cols, batch.ttft, np.zeros(49, dtype=bool))
    with pytest.raises(ValueError, match="kind"):
        train_target(
            "ttft",
            batch.cols,
            batch.ttft,
            np.zeros(50, dtype=bool),
            kind="lightgbm",  # type: ignore[arg-type]
        )
