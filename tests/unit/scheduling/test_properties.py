"""Property-based checks of the rules that must hold for every pool and request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.scheduling import Candidate, SchedulingPolicy, SchedulingRequest, Topology, schedule

from .helpers import pod

PROFILE = settings(max_examples=150, deadline=None)

pod_state = st.fixed_dictionaries(
    {
        "ttft": st.floats(1.0, 3000.0),
        "tpot": st.floats(1.0, 100.0),
        "kv": st.floats(0.0, 1.0),
        "running": st.integers(0, 6),
        "dispatched": st.none() | st.integers(0, 6),
        "waiting": st.integers(0, 6),
        "prefix": st.sampled_from([0.0, 0.5, 0.85, 1.0]),
        "running_slos": st.lists(st.floats(5.0, 100.0), max_size=2),
        "role": st.sampled_from(["", "", "prefill", "decode"]),
        "rack": st.sampled_from(["r1", "r2", None]),
        "region": st.sampled_from(["us", "eu", None]),
    }
)
pools = st.lists(pod_state, min_size=1, max_size=10)
ttft_slos = st.floats(50.0, 3000.0)
tpot_slos = st.floats(5.0, 100.0)


def build(
    states: Sequence[dict[str, Any]], *, roles: bool = False, prefix: bool = True
) -> list[Candidate]:
    return [
        pod(
            f"pod-{i}",
            kv_cache_percentage=s["kv"],
            num_request_running=s["running"],
            num_request_waiting=s["waiting"],
            dispatched_requests=s["dispatched"],
            prefix_cache_score=s["prefix"] if prefix else 0.0,
            running_tpot_slos_ms=tuple(s["running_slos"]),
            role=s["role"] if roles else "",
            topology=Topology(rack=s["rack"], region=s["region"]),
        )
        for i, s in enumerate(states)
    ]


def predictor_for(states: Sequence[dict[str, Any]]) -> Any:
    ttft = np.array([s["ttft"] for s in states])
    tpot = np.array([s["tpot"] for s in states])
    return lambda candidates, request: (ttft, tpot)


def buffered_tpot_slo(s: dict[str, Any], tpot_slo: float) -> float:
    running: list[float] = [x for x in s["running_slos"] if x > 0]
    return min([tpot_slo, *running])


@PROFILE
@given(pools, ttft_slos, tpot_slos, st.sampled_from(["least", "most"]), st.integers(0, 2**16))
def test_best_fit_picks_the_extreme_non_negative_combined_headroom(
    states: list[dict[str, Any]], ttft_slo: float, tpot_slo: float, strategy: str, seed: int
) -> None:
    """best-fit least: the pod with the smallest non-negative combined headroom; most: largest."""
    policy = SchedulingPolicy(
        picker="best_fit",
        strategy=strategy,  # type: ignore[arg-type]
        epsilon_explore_neg=0.0,
        affinity_exploration_probability=0.0,
    )
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, seed=seed)
    d = schedule(request, build(states, prefix=False), policy, predictor_for(states))
    combined = {}
    for i, s in enumerate(states):
        th, tph = ttft_slo - s["ttft"], buffered_tpot_slo(s, tpot_slo) - s["tpot"]
        if th >= 0 and tph >= 0:
            combined[f"pod-{i}"] = 0.8 * th + 0.2 * tph
    if combined:
        assert d.chosen in combined
        best = min(combined.values()) if strategy == "least" else max(combined.values())
        assert abs(combined[d.chosen] - best) <= 1e-6 * max(1.0, abs(best))
    else:
        assert d.chosen is not None


@PROFILE
@given(pools, ttft_slos, tpot_slos, st.integers(-3, 3), st.integers(0, 2**16))
def test_sheddable_rejected_only_when_no_pod_is_valid_idle_or_cold(
    states: list[dict[str, Any]], ttft_slo: float, tpot_slo: float, priority: int, seed: int
) -> None:
    """admitter: sheddable rejected iff no pod meets its SLO and none is idle or cold."""
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, priority=priority, seed=seed)
    d = schedule(request, build(states), SchedulingPolicy(), predictor_for(states))
    valid = any(s["ttft"] < ttft_slo and s["tpot"] < buffered_tpot_slo(s, tpot_slo) for s in states)
    idle = any(s["running"] == 0 for s in states)
    cold = any(s["kv"] < 0.02 for s in states)
    assert d.admitted is (priority >= 0 or valid or idle or cold)
    assert (d.chosen is not None) is d.admitted


class PredictorDown(Exception):
    pass


def raises(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    raise PredictorDown("connection refused")


def raises_timeout(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    raise TimeoutError


def wrong_length(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    return np.ones(len(candidates) + 1), np.ones(len(candidates) + 1)


def all_nan(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    return np.full(len(candidates), np.nan), np.full(len(candidates), np.nan)


def not_a_tuple(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    return None


@PROFILE
@given(
    pools,
    st.none() | ttft_slos,
    st.none() | tpot_slos,
    st.integers(-3, 3),
    st.sampled_from([raises, raises_timeout, wrong_length, all_nan, not_a_tuple, None]),
    st.sampled_from(
        [
            SchedulingPolicy(),
            SchedulingPolicy(mode="routing"),
            SchedulingPolicy(picker="best_fit"),
            SchedulingPolicy(pd_selection="joint"),
        ]
    ),
    st.integers(0, 2**16),
)
def test_a_failing_predictor_never_drops_a_request(
    states: list[dict[str, Any]],
    ttft_slo: float | None,
    tpot_slo: float | None,
    priority: int,
    predictor: Any,
    policy: SchedulingPolicy,
    seed: int,
) -> None:
    """fallback: whatever the predictor does, the request is admitted and gets a pod."""
    candidates = build(states, roles=True)
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, priority=priority, seed=seed)
    d = schedule(request, candidates, policy, predictor)
    assert d.admitted and d.fallback
    assert d.chosen in {c.name for c in candidates}
    assert d.predictor_error


@PROFILE
@given(
    pools, st.none() | ttft_slos, st.none() | tpot_slos, st.integers(-1, 1), st.integers(0, 2**16)
)
def test_same_seed_same_decision(
    states: list[dict[str, Any]],
    ttft_slo: float | None,
    tpot_slo: float | None,
    priority: int,
    seed: int,
) -> None:
    """Determinism: a decision with a seed is reproducible, P/D pools included."""
    candidates = build(states, roles=True)
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, priority=priority, seed=seed)
    first = schedule(request, candidates, SchedulingPolicy(), predictor_for(states)).to_dict()
    again = schedule(request, candidates, SchedulingPolicy(), predictor_for(states)).to_dict()
    assert first == again


@PROFILE
@given(pools, st.none() | ttft_slos, st.none() | tpot_slos, st.integers(0, 2**16))
def test_chosen_pod_survived_the_filters_and_is_scored(
    states: list[dict[str, Any]], ttft_slo: float | None, tpot_slo: float | None, seed: int
) -> None:
    """picker: picks an alive pod; with any positive score, a pod with a positive score."""
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, seed=seed)
    d = schedule(request, build(states), SchedulingPolicy(), predictor_for(states))
    chosen = next(c for c in d.candidates if c.name == d.chosen)
    assert chosen.removed_by is None
    scores = [c.score for c in d.candidates if c.score is not None]
    if any(s > 0 for s in scores):
        assert chosen.score is not None and chosen.score > 0


@PROFILE
@given(pools, st.integers(100, 20000), st.integers(0, 2**16))
def test_joint_pd_is_never_predicted_slower_than_greedy_without_slos(
    states: list[dict[str, Any]], prompt: int, seed: int
) -> None:
    """joint P/D minimises predicted e2e over all pairs, so it is never worse than greedy's."""
    candidates = build(states, roles=True)
    request = SchedulingRequest(prompt, seed=seed)
    d = schedule(request, candidates, SchedulingPolicy(pd_selection="joint"), predictor_for(states))
    if d.pd is not None:
        assert d.pd.e2e_ms is not None and d.pd.greedy_e2e_ms is not None
        assert d.pd.e2e_ms <= d.pd.greedy_e2e_ms + 1e-9
        assert d.pd.saved_ms is not None and d.pd.saved_ms >= -1e-9


def load_aware_predictor_for(states: Sequence[dict[str, Any]]) -> Any:
    """Like ``predictor_for`` but answering from the gauges (so counterfactual pods differ):
    prefill tokens in flight add TTFT and TPOT."""
    base = {f"pod-{i}": (s["ttft"], s["tpot"]) for i, s in enumerate(states)}

    def predict(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
        ttft = [base[c.name][0] + 0.1 * c.prefill_tokens_in_flight for c in candidates]
        tpot = [base[c.name][1] + 0.01 * c.prefill_tokens_in_flight for c in candidates]
        return np.asarray(ttft), np.asarray(tpot)

    return predict


INTERFERENCE = st.sampled_from(["interference", "interference_tpot", "interference_queue"])


@PROFILE
@given(
    pools,
    st.none() | ttft_slos,
    st.none() | tpot_slos,
    INTERFERENCE,
    st.sampled_from(["weighted_random", "best_fit"]),
    st.integers(0, 2**16),
)
def test_interference_same_seed_same_decision_and_never_a_filtered_pod(
    states: list[dict[str, Any]],
    ttft_slo: float | None,
    tpot_slo: float | None,
    scorer: Any,
    picker: Any,
    seed: int,
) -> None:
    """The interference scorer: reproducible with a seed, and the chosen pod survived every
    filter (its own included) and is scored."""
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, seed=seed)
    policy = SchedulingPolicy(scorer=scorer, picker=picker)
    candidates = build(states)
    first = schedule(request, candidates, policy, load_aware_predictor_for(states))
    again = schedule(request, candidates, policy, load_aware_predictor_for(states))
    assert first.to_dict() == again.to_dict()
    chosen = next(c for c in first.candidates if c.name == first.chosen)
    assert chosen.removed_by is None and chosen.score is not None


@PROFILE
@given(pools, ttft_slos, tpot_slos, INTERFERENCE, st.integers(0, 2**16))
def test_interference_without_removals_decides_as_the_headroom_scorer(
    states: list[dict[str, Any]], ttft_slo: float, tpot_slo: float, scorer: Any, seed: int
) -> None:
    """When every pod costs as many expected misses, the tie-break is the headroom rule: the
    same pod as the headroom scorer with the same seed (it draws nothing of its own)."""
    request = SchedulingRequest(1000, ttft_slo, tpot_slo, seed=seed)
    predictor = load_aware_predictor_for(states)
    candidates = build(states)
    ours = schedule(request, candidates, SchedulingPolicy(scorer=scorer), predictor)
    upstream = schedule(request, candidates, SchedulingPolicy(), predictor)
    if not any(c.removed_by == "interference-scorer" for c in ours.candidates):
        assert ours.chosen == upstream.chosen
