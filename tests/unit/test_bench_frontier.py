"""The baselines' frontier that the autoscaling comparison reads Headroom against."""

from __future__ import annotations

import pytest

from bench.autoscale_frontier import best_at, compare, cost_for, upper_hull

# (GPU-hours, attainment): WVA's defaults, a costlier HPA that does worse, a point under the
# chord between its neighbours, and a costliest point past the best one.
POINTS = [(2.7, 0.64), (3.9, 0.53), (4.5, 0.70), (6.0, 0.80), (8.0, 0.79)]


def test_hull_keeps_only_the_frontier_up_to_its_best_point() -> None:
    assert upper_hull(POINTS) == [(0.0, 0.0), (2.7, 0.64), (6.0, 0.80)]


def test_best_at_interpolates_and_never_falls_past_the_best_point() -> None:
    hull = upper_hull(POINTS)
    assert best_at(hull, 2.7) == pytest.approx(0.64)
    assert best_at(hull, 4.35) == pytest.approx(0.72)  # halfway between 2.7 and 6.0
    assert best_at(hull, 9.0) == pytest.approx(0.80)  # the costlier 0.79 does not pull it down


def test_cost_for_is_the_inverse_and_none_past_the_frontier() -> None:
    hull = upper_hull(POINTS)
    assert cost_for(hull, 0.72) == pytest.approx(4.35)
    assert cost_for(hull, 0.81) is None


def test_compare_reads_the_lead_at_headrooms_own_cost() -> None:
    result = compare((4.35, 0.79), POINTS)
    assert result["lead_points"] == pytest.approx(7.0)
    assert result["cost_ratio"] == pytest.approx(4.35 / (2.7 + 3.3 * 0.15 / 0.16), abs=1e-3)


def test_past_the_frontier_the_cost_is_read_against_its_best_point() -> None:
    result = compare((5.0, 0.85), POINTS)  # more than any baseline point attains
    assert result["baselines_never_reach"]
    assert result["cost_ratio"] == pytest.approx(5.0 / 6.0, abs=1e-3)
