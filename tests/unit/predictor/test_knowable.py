"""Live error against what was knowable: both errors on the same requests, and the demo's window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from backend.predictor.knowable import MIN_ROWS, FloorWindow, against_floor


def test_both_errors_are_taken_on_the_requests_that_have_a_prediction_and_a_floor() -> None:
    actual = np.full(40, 100.0)
    predicted = np.full(40, 120.0)  # 20 % high
    floor = np.full(40, 95.0)  # 5 % low
    # Rows that say nothing of the comparison: no prediction, not sampled, no actual.
    predicted[0], floor[1], actual[2] = math.nan, math.nan, 0.0
    result = against_floor(actual, predicted, floor)
    assert result is not None
    assert result.n == 37
    assert result.live.mape == pytest.approx(0.20)
    assert result.live.median_bias == pytest.approx(0.20)
    assert result.floor.mape == pytest.approx(0.05)
    assert result.floor.median_bias == pytest.approx(-0.05)
    assert result.ratio == pytest.approx(4.0)


def test_too_few_rows_give_no_comparison_and_a_perfect_floor_no_ratio() -> None:
    rows = MIN_ROWS - 1
    assert against_floor(np.ones(rows), np.ones(rows), np.ones(rows)) is None
    exact = against_floor(np.ones(MIN_ROWS), np.full(MIN_ROWS, 2.0), np.ones(MIN_ROWS))
    assert exact is not None and exact.floor.mape == 0.0 and exact.ratio is None
    with pytest.raises(ValueError, match="one value per row"):
        against_floor(np.ones(3), np.ones(2), np.ones(3))


def test_the_window_keeps_each_pools_newest_rows_per_target() -> None:
    window = FloorWindow(rows=30)
    assert window.summary("default", "ttft") is None
    for i in range(50):
        # The first 20 rows err 50 %, the last 30 err 10 %: only those are kept.
        window.add("default", "ttft", 100.0, 150.0 if i < 20 else 110.0, 100.0 + (i % 2), 3)
    window.add("default", "ttft", 100.0, math.nan, 100.0, 3)  # no prediction: not kept
    window.add("default", "ttft", 100.0, 110.0, math.nan, 3)  # not sampled: not kept
    for _ in range(25):
        window.add("h100", "ttft", 10.0, 5.0, 10.0, 0)
    ttft = window.summary("default", "ttft")
    assert ttft is not None and ttft.n == 30 and ttft.by_decile == ()  # too few for deciles
    assert ttft.live.mape == pytest.approx(0.10)
    assert ttft.floor.mape == pytest.approx(0.005)
    other = window.summary("h100", "ttft")
    assert other is not None and other.live.mape == pytest.approx(0.5)
    assert window.summary("default", "tpot") is None
    with pytest.raises(ValueError):
        FloorWindow(rows=0)


def test_each_load_decile_reports_the_errors_of_its_own_requests() -> None:
    # Load 0-9, 30 requests each; the live prediction is off by 2 % per request on the pod,
    # the floor by 1 % everywhere: a model that grows optimistic as the pod fills.
    load = np.repeat(np.arange(10.0), 30)
    actual = np.full(load.size, 100.0)
    predicted = actual * (1.0 - 0.02 * load)
    floor = np.full(load.size, 99.0)
    result = against_floor(actual, predicted, floor, load)
    assert result is not None and len(result.by_decile) == 10
    for k, decile in enumerate(result.by_decile):
        assert decile.load_min == decile.load_max == k and decile.live.n == 30
        assert decile.live.median_bias == pytest.approx(-0.02 * k)
        assert decile.floor.mape == pytest.approx(0.01)
    # A load shared by many requests is spread over the deciles, each a sample of it.
    busy = against_floor(actual, predicted, floor, np.zeros(load.size))
    assert busy is not None and {d.live.n for d in busy.by_decile} == {30}
    few = against_floor(actual[:199], predicted[:199], floor[:199], load[:199])
    assert few is not None and few.by_decile == ()
    with pytest.raises(ValueError, match="one value per row"):
        against_floor(actual, predicted, floor, load[:10])
