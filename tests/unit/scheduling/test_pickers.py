"""weighted-random-picker (upstream A-Res) and our deterministic best-fit picker."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from backend.scheduling.pickers import BestFitPicker, WeightedRandomPicker
from backend.scheduling.scorer import LatencyScorer
from backend.scheduling.types import SchedulingPolicy, SchedulingRequest

from .helpers import pod, state_for

PODS = [pod("a"), pod("b"), pod("c")]


def lottery(scores: list[float], draws: int = 6000) -> Counter[str]:
    wins: Counter[str] = Counter()
    for seed in range(draws):
        state = state_for(PODS, None, seed=seed)
        state.scores[:] = scores
        wins[state.features.names[WeightedRandomPicker()(state)]] += 1
    return wins


def test_picker_a_res_picks_in_proportion_to_score() -> None:
    """picker: key = U^(1/score), largest key wins -> P(win) proportional to score."""
    wins = lottery([1.0, 0.5, 0.0])
    assert wins["c"] == 0, "score 0 gets key 0 and never beats a positive key"
    assert wins["a"] / 6000 == pytest.approx(2 / 3, abs=0.03)


def test_picker_uniform_when_all_scores_non_positive() -> None:
    """picker: all scores <= 0 -> uniform random pick."""
    wins = lottery([0.0, 0.0, -1.0], draws=3000)
    assert set(wins) == {"a", "b", "c"}
    assert all(abs(w / 3000 - 1 / 3) < 0.04 for w in wins.values())


def test_picker_only_picks_alive_pods() -> None:
    state = state_for(PODS, None, seed=3)
    state.scores[:] = [0.0, 1.0, 1.0]
    state.remove(np.array([1]), "test")
    assert WeightedRandomPicker()(state) == 2


REQ = SchedulingRequest(1000, ttft_slo_ms=500, tpot_slo_ms=50)


def best_fit(
    ttft: list[float], tpot: list[float], strategy: str = "least", **pod_kw: dict[str, int]
) -> str:
    policy = SchedulingPolicy(picker="best_fit", strategy=strategy)  # type: ignore[arg-type]
    pods = [pod(n, **pod_kw.get(n, {})) for n in ("a", "b", "c")]
    state = state_for(pods, ttft, tpot, request=REQ, policy=policy)
    LatencyScorer(policy)(state)
    return state.features.names[BestFitPicker(policy)(state)]


@pytest.mark.parametrize(
    ("ttft", "tpot", "strategy", "winner"),
    [
        pytest.param(
            [100, 400, 900],
            [10, 10, 10],
            "least",
            "b",
            id="best-fit least: smallest non-negative combined headroom",
        ),
        pytest.param(
            [100, 400, 900],
            [10, 10, 10],
            "most",
            "a",
            id="best-fit most: largest combined headroom",
        ),
        pytest.param(
            [400, 400, 100],
            [40, 10, 10],
            "least",
            "a",
            id="best-fit least: TPOT slack counts in combined headroom",
        ),
        pytest.param(
            [400, 400, 900], [10, 10, 10], "least", "a", id="best-fit: ties go to the first name"
        ),
        pytest.param(
            [600, 900, 800],
            [10, 10, 10],
            "least",
            "a",
            id="best-fit: none meets the SLO -> smallest deficit",
        ),
        pytest.param(
            [600, 100, 600],
            [60, 60, 10],
            "least",
            "b",
            id="best-fit: deficit buckets as upstream (TPOT-only first)",
        ),
    ],
)
def test_best_fit_rules(ttft: list[float], tpot: list[float], strategy: str, winner: str) -> None:
    assert best_fit(ttft, tpot, strategy) == winner


def test_best_fit_prefers_idle_when_nothing_meets_the_slo() -> None:
    assert best_fit([600, 900, 800], [10, 10, 10], c={"num_request_running": 0}) == "c"


def test_best_fit_without_predictions_takes_the_highest_composite_score() -> None:
    policy = SchedulingPolicy(picker="best_fit")
    pods = [pod("a", kv_cache_percentage=0.9), pod("b", kv_cache_percentage=0.1), pod("c")]
    state = state_for(pods, None, policy=policy)
    LatencyScorer(policy)(state)
    assert state.features.names[BestFitPicker(policy)(state)] == "b"
