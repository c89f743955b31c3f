from __future__ import annotations

import json

import numpy as np
import pytest

from backend.predictor.evaluation import evaluate


def test_metrics_on_hand_made_arrays() -> None:
    true = [100.0, 200.0, 50.0, 400.0]
    pred = [110.0, 180.0, 50.0, 500.0]
    # relative errors: +0.10, -0.10, 0.0, +0.25
    m = evaluate(true, pred)
    assert m.n == 4
    assert m.mape == pytest.approx((0.10 + 0.10 + 0.0 + 0.25) / 4)
    assert m.mae == pytest.approx((10 + 20 + 0 + 100) / 4)
    assert m.rmse == pytest.approx(np.sqrt((100 + 400 + 0 + 10000) / 4))
    assert m.median_bias == pytest.approx(0.05)  # median of -0.1, 0, 0.1, 0.25
    assert m.p90_ape == pytest.approx(np.percentile([0.1, 0.1, 0.0, 0.25], 90))
    assert m.coverage is None and m.quantile_loss is None


def test_under_prediction_gives_negative_bias() -> None:
    assert evaluate([100, 100, 100], [50, 60, 70]).median_bias == pytest.approx(-0.4)


def test_quantile_metrics() -> None:
    true = np.array([10.0, 20.0, 30.0, 40.0])
    pred = np.array([12.0, 20.0, 25.0, 50.0])
    m = evaluate(true, pred, quantile=0.9)
    assert m.coverage == pytest.approx(0.75)
    # pinball: under-prediction by 5 costs 0.9 * 5, over-predictions cost 0.1 each unit
    assert m.quantile_loss == pytest.approx((0.1 * 2 + 0 + 0.9 * 5 + 0.1 * 10) / 4)


def test_rows_without_a_positive_label_are_not_scored() -> None:
    m = evaluate([0.0, 100.0, np.nan, -5.0], [10.0, 110.0, 1.0, 1.0])
    assert m.n == 1
    assert m.mape == pytest.approx(0.1)
    with pytest.raises(ValueError, match="no rows"):
        evaluate([0.0], [1.0])


def test_as_dict_is_json_serialisable() -> None:
    m = evaluate([1.0, 2.0], [1.0, 2.5], quantile=0.9)
    data = json.loads(json.dumps(m.as_dict()))
    assert set(data) >= {"n", "mape", "mae", "p90_ape", "median_bias", "coverage"}
    assert data["n"] == 2


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="labels"):
        evaluate([1.0, 2.0], [1.0])
