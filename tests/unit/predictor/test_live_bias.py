"""Live bias near saturation: the top load decile, its sign, and which version a row belongs to."""

from __future__ import annotations

import numpy as np
import pytest

from backend.predictor.live_bias import attribute, high_load_bias


def _rows(n: int = 1000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    load = rng.integers(0, 100, n).astype(np.float64)
    actual = 100.0 + load * 5.0
    # Exact at low load, 20 % too low at load >= 90: the optimism the proposal warns about.
    predicted = np.where(load >= 90, actual * 0.8, actual)
    return actual, predicted, load


def test_the_bias_is_measured_in_the_top_decile_only() -> None:
    actual, predicted, load = _rows()
    hl = high_load_bias(actual, predicted, load)
    assert hl is not None
    assert hl.bias == pytest.approx(-0.2)
    assert hl.optimistic
    assert hl.load_threshold >= 89
    assert 80 <= hl.n <= 130  # about a tenth of the rows
    # Over all rows the median hides it: the point of looking at the top decile.
    assert np.median((predicted - actual) / actual) == pytest.approx(0.0)


def test_the_sign_is_predicted_minus_actual() -> None:
    actual, _, load = _rows()
    hl = high_load_bias(actual, actual * 1.1, load)
    assert hl is not None
    assert hl.bias == pytest.approx(0.1)
    assert not hl.optimistic
    # 4 % optimistic is within the 5 % limit.
    within = high_load_bias(actual, actual * 0.96, load)
    assert within is not None and not within.optimistic


def test_rows_without_a_prediction_are_skipped_and_few_rows_give_nothing() -> None:
    actual, predicted, load = _rows()
    predicted[load >= 90] = np.nan  # the router sent no prediction for the loaded rows
    hl = high_load_bias(actual, predicted, load)
    assert hl is not None
    assert hl.bias == pytest.approx(0.0)  # the decile is drawn over the rows that have one
    assert high_load_bias(actual[:50], predicted[:50], load[:50]) is None
    assert high_load_bias([], [], []) is None


def test_ties_at_the_threshold_count_as_high_load() -> None:
    # Integer gauges: every row at the same load is all "top decile", not an empty one.
    hl = high_load_bias(np.full(100, 100.0), np.full(100, 90.0), np.full(100, 3.0))
    assert hl is not None and hl.n == 100 and hl.bias == pytest.approx(-0.1)


def test_a_row_belongs_to_the_version_active_when_it_was_observed() -> None:
    owner = attribute([5.0, 10.0, 15.0, 20.0, 25.0], [10.0, 20.0])
    assert owner.tolist() == [-1, 0, 0, 1, 1]
