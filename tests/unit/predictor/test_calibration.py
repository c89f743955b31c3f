"""The calibrated p90 beside the mean: per load band, from held-out rows, kept in the artifact."""

from __future__ import annotations

import numpy as np
import pytest

from backend.predictor.calibration import QuantileCalibration, fit_calibration
from backend.predictor.features import feature_matrix
from backend.predictor.regressors import load_model
from backend.predictor.training import train_target
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows


def _noisy(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A perfect mean whose spread grows with load: log-sd 0.05 idle, 0.45 at load 40."""
    rng = np.random.default_rng(seed)
    load = rng.integers(0, 41, n).astype(np.float64)
    mean = 20.0 + load
    actual = mean * np.exp(rng.normal(0.0, 0.05 + 0.01 * load, n))
    return load, actual, mean


def test_the_p90_covers_nine_in_ten_in_every_load_band() -> None:
    cal = fit_calibration(*_noisy(4000, seed=0))
    assert cal is not None and len(cal.factors) == 4
    # The spread grows with load, so must the factor (one pool-wide factor could not cover).
    assert cal.factors[-1] > cal.factors[0] * 1.3
    load, actual, mean = _noisy(20000, seed=1)
    under = actual <= mean * cal.factor(load)
    for lo, hi in ((0, 10), (11, 20), (21, 30), (31, 40)):
        band = (load >= lo) & (load <= hi)
        assert 0.85 <= under[band].mean() <= 0.95, (lo, hi, under[band].mean())


def test_too_few_rows_give_no_calibration_and_thin_bands_merge() -> None:
    load, actual, mean = _noisy(20, seed=2)
    assert fit_calibration(load, actual, mean) is None
    # 60 rows: two bands at most, each with at least 25 rows.
    load, actual, mean = _noisy(60, seed=3)
    cal = fit_calibration(load, actual, mean)
    assert cal is not None and 1 <= len(cal.factors) <= 2
    assert len(cal.edges) == len(cal.factors) - 1
    with pytest.raises(ValueError):
        fit_calibration(load, actual, mean, quantile=1.0)
    assert QuantileCalibration.from_dict(cal.to_dict()) == cal


def test_a_trained_model_serves_its_p90_with_the_version() -> None:
    data = sample_rows(3000, np.random.default_rng(0), load_profile("a100-llama3-8b"))
    is_test = np.random.default_rng(1).random(3000) < 0.2
    result = train_target("tpot", data, data["actual_tpot_ms"], is_test, kind="hybrid")
    model = result.model
    assert model.calibration is not None and model.calibration.n == result.n_test
    restored = load_model(model.to_artifact())
    assert restored.calibration == model.calibration
    X = feature_matrix("tpot", data)
    upper = restored.predict_upper(X)
    assert upper is not None
    covered = float(np.mean(data["actual_tpot_ms"][is_test] <= upper[is_test]))
    assert 0.85 <= covered <= 0.95
