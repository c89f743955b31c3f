"""Residual calibration: the served mean's correction and the p90 beside it, per load band, from
live rows (or held-out ones), kept in the artifact."""

from __future__ import annotations

import numpy as np
import pytest

from backend.predictor.calibration import (
    LIVE_ROWS,
    MIN_LIVE_ROWS,
    Calibration,
    LiveRows,
    calibrate,
    fit_calibration,
    meet_probability,
)
from backend.predictor.features import feature_matrix
from backend.predictor.gate import served_factors
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
    assert cal is not None and len(cal.correction) == 4
    # Held-out rows: the mean is left as trained.
    assert cal.correction == (1.0,) * 4 and cal.source == "held_out"
    # The spread grows with load, so must the factor (one pool-wide factor could not cover).
    assert cal.upper(40.0)[()] > cal.upper(0.0)[()] * 1.3
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
    assert cal is not None and 1 <= len(cal.correction) <= 2
    assert len(cal.edges) == len(cal.correction) - 1
    with pytest.raises(ValueError):
        fit_calibration(load, actual, mean, quantile=1.0)
    assert Calibration.from_dict(cal.to_dict()) == cal


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


def _selected(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Live rows of a winner's curse: the router picked the lowest of 4 noisy predictions, so
    the chosen one is low, and more so at high load where the model's error is wider."""
    rng = np.random.default_rng(seed)
    load = rng.integers(0, 41, n).astype(np.float64)
    actual = (20.0 + load) * np.exp(rng.normal(0.0, 0.1, n))
    noise = rng.normal(0.0, 1.0, (n, 4)).min(axis=1) * (0.05 + 0.005 * load)
    served = (20.0 + load) * np.exp(noise)
    return load, actual, served


def _median_bias(actual: np.ndarray, served: np.ndarray) -> float:
    return float(np.median((served - actual) / actual))


def test_live_rows_correct_the_mean_to_no_median_bias_in_every_band() -> None:
    load, actual, served = _selected(LIVE_ROWS, seed=4)
    assert _median_bias(actual, served) < -0.05  # the premise: optimistic before
    cal = calibrate(None, LiveRows(load, actual, served))
    assert cal is not None and cal.source == "live" and len(cal.correction) > 4
    # Fresh rows of the same process: corrected, the median bias is ~0 in every load band.
    load, actual, served = _selected(20000, seed=5)
    corrected = served * cal.mean_factor(load)
    for lo, hi in ((0, 10), (11, 20), (21, 30), (31, 40)):
        band = (load >= lo) & (load <= hi)
        assert abs(_median_bias(actual[band], corrected[band])) < 0.02, (lo, hi)
        under = actual[band] <= corrected[band] * cal.upper(load[band])
        assert 0.85 <= under.mean() <= 0.95, (lo, hi, under.mean())
    assert Calibration.from_dict(cal.to_dict()) == cal


def test_served_predictions_are_attributed_to_the_version_that_routed_them() -> None:
    """A row newer than a version's training and not newer than the next one's was routed by
    it: its served prediction is undone with that version's correction before refitting, so a
    second round does not apply the correction twice."""
    load, actual, raw = _selected(LIVE_ROWS, seed=6)
    first = calibrate(None, LiveRows(load, actual, raw))
    assert first is not None
    ids = np.arange(1, LIVE_ROWS + 1)
    # Rows 1-500 routed before any calibration, the rest by a version with ``first``.
    served_by: list[tuple[int, Calibration | None]] = [(0, None), (500, first)]
    factor = served_factors(ids, load, served_by)
    np.testing.assert_array_equal(factor[:500], 1.0)
    np.testing.assert_allclose(factor[500:], first.mean_factor(load[500:]))
    served = raw * factor
    again = calibrate(None, LiveRows(load, actual, served / factor))
    assert again is not None and again.edges == first.edges
    np.testing.assert_allclose(again.correction, first.correction)
    np.testing.assert_allclose(again.points, first.points)
    # Not undoing it would have doubled the correction at the high loads.
    doubled = calibrate(None, LiveRows(load, actual, served))
    assert doubled is not None
    high = load >= 30
    assert np.median(doubled.mean_factor(load[high])) < np.median(first.mean_factor(load[high]))
    assert served_factors(ids, load, []).tolist() == [1.0] * LIVE_ROWS


def test_too_few_live_rows_fall_back_to_held_out_rows() -> None:
    load, actual, served = _selected(MIN_LIVE_ROWS - 1, seed=8)
    # Rows without a prediction do not count towards the live minimum.
    served = np.concatenate([served, np.full(500, np.nan)])
    load, actual = (
        np.concatenate([load, np.full(500, 5.0)]),
        np.concatenate([actual, np.full(500, 30.0)]),
    )
    held = _noisy(400, seed=9)
    cal = calibrate(held, LiveRows(load, actual, served))
    assert cal is not None and cal.source == "held_out" and set(cal.correction) == {1.0}
    assert calibrate(None, LiveRows(load, actual, served)) is None


def test_meeting_probability_is_the_share_of_ratios_under_the_slo() -> None:
    load, actual, served = _noisy(4000, seed=10)
    cal = fit_calibration(load, actual, served)
    assert cal is not None
    # Against fresh rows: the predicted chance of meeting 40 ms matches the measured share.
    load, actual, served = _noisy(20000, seed=11)
    p = meet_probability(load, served, np.ones_like(served), 40.0, None, cal, None)
    for lo, hi in ((10, 15), (16, 25), (26, 40)):
        band = (load >= lo) & (load <= hi)
        assert abs(p[band].mean() - (actual[band] < 40.0).mean()) < 0.05, (lo, hi)
    # Lower served means are likelier to meet; both SLOs multiply.
    q = meet_probability([20.0, 20.0], [30.0, 60.0], [1.0, 1.0], 40.0, None, cal, None)
    assert 1.0 >= q[0] > q[1] >= 0.0
    both = meet_probability([20.0], [30.0], [10.0], 40.0, 12.0, cal, cal)
    assert both[0] <= q[0]


def test_with_no_spread_the_probability_is_the_zero_one_rule() -> None:
    load = np.arange(0.0, 40.0)
    served = np.linspace(10.0, 50.0, 40)
    cal = fit_calibration(load, served, served)  # actual == served: every ratio is 1
    assert cal is not None
    p = meet_probability(load, served, served * 0.0 + 1.0, 30.0, 2.0, cal, cal)
    np.testing.assert_array_equal(p, ((served <= 30.0) & (1.0 <= 2.0)).astype(float))
    # At the SLO meets, as the chain's tier counts a pod positive (headroom >= 0); just over
    # it misses; no calibration: the 0/1 rule.
    assert meet_probability([0.0], [30.0], [1.0], 30.0, None, cal, None)[0] == 1.0
    assert meet_probability([0.0], [30.0001], [1.0], 30.0, None, cal, None)[0] == 0.0
    np.testing.assert_array_equal(
        meet_probability(load, served, served, 30.0, None, None, None), (served <= 30.0) * 1.0
    )


def test_an_artifact_calibration_from_before_the_correction_still_loads() -> None:
    old = {"quantile": 0.9, "edges": [3.0], "factors": [1.2, 1.5], "n": 100}
    cal = Calibration.from_dict(old)
    np.testing.assert_allclose(cal.mean_factor([0.0, 9.0]), [1.0, 1.0])
    np.testing.assert_allclose(cal.upper([0.0, 9.0]), [1.2, 1.5])


def test_the_spread_comes_from_what_was_served_when_the_prediction_is_a_stand_in() -> None:
    """A stand-in prediction recomputed by a model that trained on the rows fits them tightly;
    the spread is then read off the served predictions (out of sample), about their median."""
    rng = np.random.default_rng(12)
    n = LIVE_ROWS
    load = rng.integers(0, 10, n).astype(np.float64)
    actual = 50.0 * np.exp(rng.normal(0.0, 0.3, n))
    stand_in = actual * np.exp(rng.normal(0.0, 0.02, n))  # in sample: nearly exact
    served = np.full(n, 45.0)  # what the router was told: 10 % low, the real spread around it
    tight = calibrate(None, LiveRows(load, actual, stand_in))
    wide = calibrate(None, LiveRows(load, actual, stand_in, served))
    assert tight is not None and wide is not None
    assert float(np.max(tight.upper(load))) < 1.1
    expected = np.quantile(actual / served, 0.9) / np.median(actual / served)
    np.testing.assert_allclose(wide.upper(load), expected, rtol=0.1)
    # The correction still comes from the stand-in.
    np.testing.assert_allclose(wide.correction, tight.correction)


def test_atypical_live_rows_widen_the_spread_but_leave_the_correction_and_bands() -> None:
    """Rows the trainer kept out (typical False) count in the spread only: the served mean and
    the bands are those of the typical rows, and the p90 reaches the slow tail."""
    load, actual, mean = _noisy(3000, seed=3)
    slow = np.random.default_rng(4).random(load.size) < 0.15
    actual = np.where(slow, actual * 5.0, actual)
    typical = LiveRows(load, actual, mean * 0.8, typical=~slow)
    only = LiveRows(load[~slow], actual[~slow], mean[~slow] * 0.8)
    with_tail, without = calibrate(None, typical), calibrate(None, only)
    assert with_tail is not None and without is not None
    assert with_tail.source == without.source == "live"
    assert with_tail.edges == without.edges
    assert with_tail.correction == pytest.approx(without.correction)
    # 15 % of the rows at 5x: the p90 of actual / served mean lies among them.
    assert float(np.min(with_tail.upper(load))) > 3.0
    assert float(np.max(without.upper(load))) < 2.5


def test_the_correction_leaves_out_what_the_version_already_learned_of_the_served_error() -> None:
    """Rows served 25 % optimistic by an older version, which the new version, trained on them,
    already predicts right: counted again, the correction would read it 25 % pessimistic. Half
    the move (in log terms) comes off: the served ratio also holds the routing's winner's curse,
    which the new version will have too. The move is measured on its held-out rows only (NaN
    elsewhere); too few, and it is not used."""
    rng = np.random.default_rng(6)
    n = 2 * MIN_LIVE_ROWS
    load = rng.integers(0, 40, n).astype(float)
    served = np.full(n, 100.0)
    actual = 125.0 * np.exp(rng.normal(0.0, 0.05, n))
    held = rng.random(n) < 0.2
    moved = np.where(held, 1.25, np.nan)  # the new version reads these rows 125 ms
    plain = calibrate(None, LiveRows(load, actual, served))
    learned = calibrate(None, LiveRows(load, actual, served, moved=moved))
    assert plain is not None and learned is not None
    np.testing.assert_allclose(plain.correction, 1.25, rtol=0.03)
    np.testing.assert_allclose(learned.correction, np.sqrt(1.25), rtol=0.03)
    assert learned.points == plain.points  # the spread is the served rows', as before
    few = np.where(np.arange(n) < 5, 1.25, np.nan)
    thin = calibrate(None, LiveRows(load, actual, served, moved=few))
    assert thin is not None and thin.correction == plain.correction
