"""The chains end to end through ``schedule``: order of plugins, modes, fallback, determinism."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import pytest

from backend.scheduling import (
    Candidate,
    SchedulingPolicy,
    SchedulingRequest,
    TransferConfig,
    schedule,
)

from .helpers import fixed, pod

SLO = SchedulingRequest(1000, ttft_slo_ms=500, tpot_slo_ms=50, seed=7)
PODS = [pod("a", prefix_cache_score=1.0), pod("b", prefix_cache_score=0.85), pod("c")]
PRED = fixed({"a": 450.0, "b": 200.0, "c": 100.0})


def plugins(policy: SchedulingPolicy, request: SchedulingRequest = SLO) -> list[str]:
    return [s.plugin for s in schedule(request, PODS, policy, PRED).steps]


def test_slo_chain_order_matches_the_routerlib_chart() -> None:
    """chain: admitter + strict(0.99) -> tier -> loose(0.8) -> latency-scorer -> picker."""
    assert plugins(SchedulingPolicy()) == [
        "latency-slo-admitter",
        "strict-affinity-filter",
        "slo-headroom-tier-filter",
        "loose-affinity-filter",
        "latency-scorer",
        "weighted-random-picker",
    ]


def test_routing_chain_is_loose_affinity_scorer_picker() -> None:
    """chain: routing-only = loose-affinity -> latency-scorer -> weighted-random (no admitter)."""
    assert plugins(SchedulingPolicy(mode="routing")) == [
        "loose-affinity-filter",
        "latency-scorer",
        "weighted-random-picker",
    ]


def removed(policy: SchedulingPolicy, pods: list[Candidate], pred: object) -> dict[str, str | None]:
    d = schedule(SLO, pods, policy, pred)  # type: ignore[arg-type]
    return {c.name: c.removed_by for c in d.candidates}


DETERMINISTIC = SchedulingPolicy(affinity_exploration_probability=0.0, epsilon_explore_neg=0.0)


def test_strict_gate_runs_before_the_tier_filter() -> None:
    """chain: strict-affinity (0.99) runs first, so an exact prefix hit is kept alone even when
    it misses the SLO, unless the TTFT gate (5000 ms) breaks it."""
    assert removed(DETERMINISTIC, PODS, fixed({"a": 900.0, "b": 200.0, "c": 100.0})) == {
        "a": None,
        "b": "strict-affinity-filter",
        "c": "strict-affinity-filter",
    }
    assert removed(DETERMINISTIC, PODS, fixed({"a": 5200.0, "b": 200.0, "c": 100.0})) == {
        "a": "slo-headroom-tier-filter",
        "b": None,
        "c": "loose-affinity-filter",
    }


def test_loose_gate_narrows_within_the_slo_tier() -> None:
    """chain: loose-affinity (0.8) runs after the tier filter, preferring partial hits among the
    pods that meet the SLO."""
    pods = [pod("a", prefix_cache_score=0.9), pod("b", prefix_cache_score=0.85), pod("c")]
    assert removed(DETERMINISTIC, pods, fixed({"a": 900.0, "b": 200.0, "c": 100.0})) == {
        "a": "slo-headroom-tier-filter",
        "b": None,
        "c": "loose-affinity-filter",
    }


def test_ttft_load_gate_in_the_chain_breaks_stickiness() -> None:
    """affinity: sticky pod predicted > 5000 ms slower than the best other -> all kept."""
    policy = SchedulingPolicy(
        mode="routing", affinity_exploration_probability=0.0, picker="best_fit"
    )
    d = schedule(
        SchedulingRequest(1000, seed=1), PODS, policy, fixed({"a": 9000, "b": 7000, "c": 100})
    )
    assert all(c.removed_by is None for c in d.candidates)
    assert d.chosen == "c"  # no SLO: the lowest predicted TTFT
    assert "load_override" in d.steps[0].outcome


def test_routing_mode_picks_lowest_predicted_latency() -> None:
    policy = SchedulingPolicy(mode="routing", picker="best_fit")
    d = schedule(SchedulingRequest(1000), [pod("x"), pod("y")], policy, fixed({"x": 9, "y": 3}))
    assert d.chosen == "y"


class Boom(Exception):
    pass


def raising(
    candidates: Sequence[Candidate], request: SchedulingRequest
) -> tuple[np.ndarray, np.ndarray]:
    raise Boom("sidecar timed out")


@pytest.mark.parametrize(
    ("predictor", "error"),
    [
        pytest.param(None, "no predictor configured", id="fallback: no predictor"),
        pytest.param(
            raising, "predictor failed: Boom: sidecar timed out", id="fallback: predictor raises"
        ),
        pytest.param(
            lambda c, r: (np.ones(1), np.ones(1)),
            "predictor returned (1,)/(1,) for 3 candidates",
            id="fallback: predictor returns the wrong shape",
        ),
        pytest.param(
            lambda c, r: (np.full(3, np.nan), np.ones(3)),
            "predictor returned no finite TTFT",
            id="fallback: predictor returns nothing finite",
        ),
        pytest.param(
            lambda c, r: ("x", "y"),
            "predictor failed: ValueError: could not convert string to float: 'x'",
            id="fallback: predictor returns garbage",
        ),
    ],
)
def test_predictor_failure_falls_back_to_the_composite_heuristic(
    predictor: object, error: str
) -> None:
    """Fallback: the decision still comes back, from the composite heuristic, marked so."""
    request = SchedulingRequest(1000, ttft_slo_ms=500, tpot_slo_ms=50, priority=-1, seed=3)
    d = schedule(request, PODS, SchedulingPolicy(), predictor)  # type: ignore[arg-type]
    assert d.admitted and d.chosen in {"a", "b", "c"}
    assert d.fallback is True
    assert d.predictor_error == error
    assert "composite heuristic" in d.reason
    assert all(c.ttft_ms is None and c.score is not None for c in d.candidates)


def test_negative_predictions_are_clipped_to_zero_as_upstream() -> None:
    d = schedule(SLO, [pod("x"), pod("y")], SchedulingPolicy(), fixed({"x": -5.0, "y": 100.0}))
    assert d.candidates[0].ttft_ms == 0.0 and d.candidates[0].ttft_headroom_ms == 500.0


def test_same_seed_same_decision() -> None:
    """Determinism: every random draw comes from Random(request.seed)."""
    many = [pod(f"p{i}", prefix_cache_score=(i % 5) / 4) for i in range(20)]
    pred = fixed({f"p{i}": 50.0 + 37 * i for i in range(20)})
    first = schedule(SLO, many, SchedulingPolicy(), pred).to_dict()
    assert all(schedule(SLO, many, SchedulingPolicy(), pred).to_dict() == first for _ in range(5))
    chosen = {
        schedule(SchedulingRequest(1000, 2000, 50, seed=s), many, SchedulingPolicy(), pred).chosen
        for s in range(40)
    }
    assert len(chosen) > 1, "different seeds explore different pods"


def test_decision_is_json_serialisable_without_nan() -> None:
    d = schedule(SLO, [*PODS, pod("d")], SchedulingPolicy(), PRED)  # d has no prediction
    text = json.dumps(d.to_dict(), allow_nan=False)
    assert json.loads(text)["candidates"][3]["ttft_ms"] is None


def test_trace_fields_explain_each_pod() -> None:
    d = schedule(
        SLO, PODS, SchedulingPolicy(epsilon_explore_neg=0.0), fixed({"a": 900, "b": 200, "c": 100})
    )
    a = d.candidates[0]
    assert (a.ttft_ms, a.ttft_headroom_ms, a.tpot_headroom_ms, a.tier, a.valid) == (
        900.0,
        -400.0,
        40.0,
        "negative",
        False,
    )
    assert a.combined_headroom_ms == pytest.approx(0.8 * -400 + 0.2 * 40)


def test_no_candidates_and_duplicate_names() -> None:
    d = schedule(SLO, [], SchedulingPolicy(), PRED)
    assert (d.admitted, d.chosen, d.reason) == (False, None, "no candidate pods")
    with pytest.raises(ValueError, match="unique"):
        schedule(SLO, [pod("a"), pod("a")], SchedulingPolicy(), PRED)


def test_policy_defaults_equal_upstream() -> None:
    p = SchedulingPolicy()
    assert (p.mode, p.strategy, p.ttft_weight, p.tpot_weight) == ("slo", "least", 0.8, 0.2)
    assert (p.epsilon_explore_neg, p.strict_affinity_threshold, p.loose_affinity_threshold) == (
        0.01,
        0.99,
        0.8,
    )
    assert (p.affinity_exploration_probability, p.max_ttft_penalty_ms, p.slo_buffer_factor) == (
        0.01,
        5000.0,
        1.0,
    )
    assert (p.fallback_kv_weight, p.fallback_queue_weight, p.fallback_prefix_weight) == (1, 1, 1)
    assert (p.picker, p.pd_selection) == ("weighted_random", "greedy")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttft_weight": 1.5},
        {"epsilon_explore_neg": -0.1},
        {"max_ttft_penalty_ms": -1},
        {"slo_buffer_factor": 0},
        {"strategy": "best"},
        {"expected_output_tokens": 0},
    ],
)
def test_policy_rejects_out_of_range_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        SchedulingPolicy(**kwargs)  # type: ignore[arg-type]


def test_pod_class_is_carried_through_to_predictor_and_trace() -> None:
    seen: list[str | None] = []

    def per_class(
        cands: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray]:
        seen.extend(c.pod_class for c in cands)
        return np.array([100.0 if c.pod_class == "h100" else 300.0 for c in cands]), np.ones(
            len(cands)
        )

    pods = [pod("x", pod_class="a100"), pod("y", pod_class="h100")]
    d = schedule(
        SchedulingRequest(1000, seed=1), pods, SchedulingPolicy(picker="best_fit"), per_class
    )
    assert seen == ["a100", "h100"]
    assert [c.pod_class for c in d.candidates] == ["a100", "h100"]
    assert d.chosen == "y"


def test_policy_round_trips_through_json() -> None:
    policy = SchedulingPolicy(
        strategy="most", picker="best_fit", transfer=TransferConfig(same_rack_gbps=40)
    )
    data = json.loads(json.dumps(policy.to_dict()))
    assert data["transfer"]["same_rack_gbps"] == 40
    assert SchedulingPolicy.from_dict(data) == policy
    assert SchedulingPolicy.from_dict({}) == SchedulingPolicy()


def test_the_tier_can_compare_the_tpot_p90_with_the_slo() -> None:
    """tpot_tier_quantile: both pods' mean TPOT meets the 50 ms SLO, but y's p90 does not; with
    "p90" the tier filter keeps x alone, with the default (upstream's mean) both stay."""
    pods = [pod("x"), pod("y")]

    def with_p90(
        candidates: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = len(candidates)
        ttft = np.full(n, 100.0)
        tpot = np.full(n, 40.0)
        p90 = np.array([45.0 if c.name == "x" else 70.0 for c in candidates])
        return ttft, tpot, p90

    mean = dataclasses.replace(DETERMINISTIC, picker="best_fit")
    upper = dataclasses.replace(mean, tpot_tier_quantile="p90")
    assert removed(mean, pods, with_p90) == {"x": None, "y": None}
    assert removed(upper, pods, with_p90) == {"x": None, "y": "slo-headroom-tier-filter"}
    # A predictor without a p90 leaves the p90 policy deciding on the mean.
    assert removed(upper, pods, fixed({"x": 100.0, "y": 100.0}, {"x": 40.0, "y": 40.0})) == {
        "x": None,
        "y": None,
    }
    with pytest.raises(ValueError):
        SchedulingPolicy(tpot_tier_quantile="p99")  # type: ignore[arg-type]


def test_without_traces_the_decision_is_the_same_and_carries_the_chosen_pods_trace_alone() -> None:
    for policy in (SchedulingPolicy(), SchedulingPolicy(mode="routing"), DETERMINISTIC):
        full = schedule(SLO, PODS, policy, PRED)
        short = schedule(SLO, PODS, policy, PRED, traces=False)
        assert short.chosen == full.chosen and short.reason == full.reason
        assert short.candidates == tuple(c for c in full.candidates if c.name == full.chosen)
        assert len(short.candidates) == 1 and len(full.candidates) == len(PODS)
    shed = SchedulingRequest(1000, ttft_slo_ms=1, tpot_slo_ms=1, priority=-1, seed=7)
    rejected = schedule(shed, PODS, SchedulingPolicy(), PRED, traces=False)
    assert (rejected.admitted, rejected.chosen, rejected.candidates) == (False, None, ())
