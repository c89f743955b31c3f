"""prefix-cache-affinity-filter and slo-headroom-tier-filter (upstream filter plugins)."""

from __future__ import annotations

import pytest

from backend.scheduling.filters import PrefixAffinityFilter, RoleFilter, SloHeadroomTierFilter
from backend.scheduling.types import SchedulingRequest

from .helpers import alive_names, pod, state_for


def affinity(
    threshold: float = 0.8, exploration: float = 0.0, penalty: float = 5000.0
) -> PrefixAffinityFilter:
    return PrefixAffinityFilter("loose-affinity-filter", threshold, exploration, penalty)


PODS = [pod("a", prefix_cache_score=0.95), pod("b", prefix_cache_score=0.8), pod("c")]


@pytest.mark.parametrize(
    ("threshold", "ttft", "kept", "outcome"),
    [
        pytest.param(
            0.8, [100, 100, 100], ["a", "b"], "sticky", id="affinity: keep prefix >= threshold"
        ),
        pytest.param(
            0.99,
            [100, 100, 100],
            ["a", "b", "c"],
            "no_match",
            id="affinity: keep all when none pass",
        ),
        pytest.param(
            0.0,
            [100, 100, 100],
            ["a", "b", "c"],
            "not_applicable",
            id="affinity: threshold 0 disables",
        ),
        pytest.param(
            0.8,
            [5200, 6000, 100],
            ["a", "b", "c"],
            "load_override (penalty 5100 ms)",
            id="affinity: TTFT gate breaks stickiness when best sticky is > penalty slower",
        ),
        pytest.param(
            0.8,
            [5100, 6000, 100],
            ["a", "b"],
            "sticky",
            id="affinity: TTFT gate holds at exactly the penalty (strictly greater breaks)",
        ),
        pytest.param(
            0.8,
            [9000, 5000, 100],
            ["a", "b"],
            "sticky",
            id="affinity: TTFT gate compares the best sticky pod, not the worst",
        ),
    ],
)
def test_affinity_filter_rules(
    threshold: float, ttft: list[float], kept: list[str], outcome: str
) -> None:
    state = state_for(PODS, ttft)
    affinity(threshold)(state)
    assert alive_names(state) == kept
    assert state.steps[-1].outcome == outcome
    assert all(
        state.removed_by[i] == "loose-affinity-filter" for i in range(3) if not state.alive[i]
    )


def test_affinity_gate_missing_signal_keeps_all() -> None:
    """affinity: with ttftSource latencyPredictor, a side without predictions skips the gate and
    keeps all (upstream's missing_signal outcome)."""
    state = state_for(PODS, None)
    affinity()(state)
    assert alive_names(state) == ["a", "b", "c"]
    assert state.steps[-1].outcome == "missing_signal"
    state = state_for(PODS, [float("nan"), float("nan"), 100.0])
    affinity()(state)
    assert state.steps[-1].outcome == "missing_signal"


def test_affinity_penalty_zero_always_sticks_even_without_predictions() -> None:
    """affinity: maxTTFTPenaltyMs 0 means always stick; the gate is not consulted."""
    state = state_for(PODS, None)
    affinity(penalty=0.0)(state)
    assert alive_names(state) == ["a", "b"]


def test_affinity_exploration_skips_the_gate() -> None:
    """affinity: explorationProbability skips the gate (all kept) in that fraction of requests."""
    explored = 0
    for seed in range(2000):
        state = state_for(PODS, [100, 100, 100], seed=seed)
        affinity(exploration=0.01)(state)
        explored += state.steps[-1].outcome == "exploration"
        assert len(alive_names(state)) == (3 if state.steps[-1].outcome == "exploration" else 2)
    assert 5 <= explored <= 45  # 1 % of 2000 = 20


def test_affinity_single_pod_is_left_alone() -> None:
    state = state_for([pod("a")], [100])
    affinity()(state)
    assert state.steps[-1].outcome == "not_applicable"


def test_affinity_filter_can_be_instantiated_twice_with_different_thresholds() -> None:
    """affinity: the SLO chain runs strict (0.99) and loose (0.8) instances."""
    state = state_for(PODS, [100, 100, 100])
    PrefixAffinityFilter("strict-affinity-filter", 0.99, 0.0, 5000.0)(state)
    assert alive_names(state) == ["a", "b", "c"]
    PrefixAffinityFilter("loose-affinity-filter", 0.8, 0.0, 5000.0)(state)
    assert alive_names(state) == ["a", "b"]


SLO = SchedulingRequest(1000, ttft_slo_ms=500, tpot_slo_ms=50)
TIER_PODS = [pod("pos1"), pod("pos2"), pod("neg")]


@pytest.mark.parametrize(
    ("ttft", "tpot", "kept", "outcome"),
    [
        pytest.param(
            [100, 200, 900],
            [10, 10, 10],
            ["pos1", "pos2"],
            "positive",
            id="tier: keep positive tier",
        ),
        pytest.param(
            [100, 200, 300],
            [10, 10, 60],
            ["pos1", "pos2"],
            "positive",
            id="tier: TPOT headroom < 0 is negative",
        ),
        pytest.param(
            [100, 200, 500],
            [10, 10, 50],
            ["pos1", "pos2", "neg"],
            "only_positive",
            id="tier: headroom == 0 is positive",
        ),
        pytest.param(
            [600, 700, 900],
            [10, 10, 10],
            ["pos1", "pos2", "neg"],
            "only_negative",
            id="tier: only negative tier kept whole",
        ),
        pytest.param(
            [100, 200, float("nan")],
            [10, 10, 10],
            ["pos1", "pos2"],
            "positive",
            id="tier: pod without prediction joins the negative tier",
        ),
    ],
)
def test_tier_filter_rules(
    ttft: list[float], tpot: list[float], kept: list[str], outcome: str
) -> None:
    state = state_for(TIER_PODS, ttft, tpot, request=SLO)
    SloHeadroomTierFilter(0.0)(state)
    assert alive_names(state) == kept
    assert state.steps[-1].outcome == outcome


def test_tier_filter_no_predictions_keeps_all() -> None:
    state = state_for(TIER_PODS, None, request=SLO)
    SloHeadroomTierFilter(0.01)(state)
    assert alive_names(state) == ["pos1", "pos2", "neg"]
    assert state.steps[-1].outcome == "no_predictions"


def test_tier_filter_epsilon_explores_the_negative_tier() -> None:
    """tier: with both tiers present, the negative tier is kept with probability epsilon."""
    negative = 0
    for seed in range(4000):
        state = state_for(TIER_PODS, [100, 200, 900], request=SLO, seed=seed)
        SloHeadroomTierFilter(0.01)(state)
        if alive_names(state) == ["neg"]:
            negative += 1
            assert state.removed_by[:2] == ["slo-headroom-tier-filter"] * 2
    assert 20 <= negative <= 65  # 1 % of 4000 = 40


def test_tier_filter_without_slo_headers_is_a_no_op() -> None:
    """tier: without SLO headers every pod is negative, so the filter keeps everyone."""
    state = state_for(TIER_PODS, [100, 200, 900], request=SchedulingRequest(1000))
    SloHeadroomTierFilter(0.5)(state)
    assert alive_names(state) == ["pos1", "pos2", "neg"]


def test_role_filters_follow_upstream_labels() -> None:
    """P/D: decode-filter accepts decode and unlabelled pods; prefill-filter only prefill."""
    pods = [pod("p", role="prefill"), pod("d", role="decode"), pod("x")]
    state = state_for(pods, [1, 1, 1])
    RoleFilter("decode")(state)
    assert alive_names(state) == ["d", "x"]
    state = state_for(pods, [1, 1, 1])
    RoleFilter("prefill")(state)
    assert alive_names(state) == ["p"]
