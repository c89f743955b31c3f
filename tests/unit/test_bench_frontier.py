"""The baselines' frontier that the autoscaling comparison reads Headroom against."""

from __future__ import annotations

import pytest

from bench.autoscale_frontier import best_at, compare, cost_for, reach, upper_hull, verdicts

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


def test_reach_places_the_baselines_best_against_foresight_and_the_ceiling() -> None:
    foresight = [(2.0, 0.60), (3.0, 0.75), (5.0, 0.82)]
    fixed = {4: (2.0, 0.55), 12: (8.0, 0.83)}
    out = reach(POINTS, foresight, fixed, [(4.35, 0.79)])
    assert out["baselines_best"] == [6.0, 0.8]
    # Foresight reaches 0.80 between 3.0 and 5.0: at 3.0 + 2.0 x 5 / 7.
    assert out["foresight_gpu_hours_for_baselines_best"] == pytest.approx(3.0 + 10 / 7, abs=1e-3)
    assert out["foresight_cost_ratio_at_baselines_best"] == pytest.approx(
        (3.0 + 10 / 7) / 6.0, abs=1e-3
    )
    assert out["ceiling_over_baselines_best_points"] == pytest.approx(3.0)
    assert out["fixed_rises_with_pods"]
    [at] = out["at_headroom_costs"]
    assert at["baselines"] == pytest.approx(0.72)
    assert at["ceiling_lead_points"] == pytest.approx(11.0)


def test_references_are_placed_not_judged_as_headrooms() -> None:
    def run(seed: int, gpu: float, att: float) -> dict[str, object]:
        return {"seed": seed, "gpu_hours": gpu, "attainment": att, "peak_replicas": 1}

    runs = {
        "wva-saturation": {0: run(0, 2.7, 0.64)},
        "foresight@pods_per_ktok=0.3": {0: run(0, 2.5, 0.70)},
        "fixed-12": {0: run(0, 8.0, 0.83)},
        "headroom-desired": {0: run(0, 3.0, 0.70)},
    }
    out = verdicts(runs)
    assert list(out["headroom"]) == ["headroom-desired"]
    assert out["reach"]["per_seed"][0]["ceiling_attainment"] == pytest.approx(0.83)
    assert out["reach"]["on_means"]["foresight_hull"] == [[0.0, 0.0], [2.5, 0.7]]
