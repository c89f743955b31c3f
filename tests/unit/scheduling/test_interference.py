"""The interference scorer: fewest SLO misses, old and new, then the headroom rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from backend.scheduling import Candidate, Predictor, SchedulingPolicy, SchedulingRequest, schedule
from backend.scheduling.interference import counterfactual, miss_probability

from .helpers import pod

REQUEST = SchedulingRequest(2000, ttft_slo_ms=1000.0, tpot_slo_ms=50.0, seed=7)


def load_aware(
    ttft: Mapping[str, float],
    tpot: Mapping[str, float],
    tpot_per_prefill_token: Mapping[str, float],
    ttft_per_prefill_token: Mapping[str, float] | None = None,
) -> Predictor:
    """A predictor that, like the learned models, answers from the pod's gauges: prefill tokens
    in flight slow the pod's decode steps and its next prefill, at a per-pod rate."""

    def predict(
        candidates: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray]:
        t = [
            ttft[c.name]
            + (ttft_per_prefill_token or {}).get(c.name, 0.0) * c.prefill_tokens_in_flight
            for c in candidates
        ]
        p = [
            tpot[c.name] + tpot_per_prefill_token[c.name] * c.prefill_tokens_in_flight
            for c in candidates
        ]
        return np.asarray(t, dtype=np.float64), np.asarray(p, dtype=np.float64)

    return predict


# "a" has more headroom for the new request (TPOT 30 against 45 ms), but its decode steps are
# sensitive: 2,000 more prefill tokens push its four running requests from 30 to 60 ms, past
# their 50 ms SLO. On "b" they stay at 45 + 2 = 47 ms.
PODS = [pod("a", num_request_waiting=0), pod("b", num_request_waiting=0)]
PREDICT = load_aware({"a": 100.0, "b": 100.0}, {"a": 30.0, "b": 45.0}, {"a": 0.015, "b": 0.001})
SPREAD = {"picker": "best_fit", "strategy": "most"}


def test_prefers_the_pod_where_fewer_running_requests_break_even_with_less_own_headroom() -> None:
    upstream = schedule(REQUEST, PODS, SchedulingPolicy(**SPREAD), PREDICT)
    ours = schedule(REQUEST, PODS, SchedulingPolicy(scorer="interference", **SPREAD), PREDICT)
    assert upstream.chosen == "a"  # the larger own headroom
    assert ours.chosen == "b"
    loser = next(c for c in ours.candidates if c.name == "a")
    assert loser.removed_by == "interference-scorer"
    assert any(s.outcome.startswith("fewest expected SLO misses") for s in ours.steps)


def test_running_requests_slos_are_taken_from_the_candidate_when_given() -> None:
    # Running requests with a loose 200 ms SLO survive "a"'s 60 ms: nothing breaks, and the new
    # request itself is likelier to meet its 50 ms on "a" (30 ms) than on "b" (45 ms).
    lenient = [
        pod("a", num_request_waiting=0, running_tpot_slos_ms=(200.0,) * 4),
        pod("b", num_request_waiting=0, running_tpot_slos_ms=(200.0,) * 4),
    ]
    d = schedule(REQUEST, lenient, SchedulingPolicy(scorer="interference", **SPREAD), PREDICT)
    assert d.chosen == "a"


def test_queue_term_avoids_tipping_a_queued_pod_past_the_ttft_slo() -> None:
    # "a" has three requests waiting; the new prefill pushes its next TTFT from 900 to 1,300 ms.
    pods = [pod("a", num_request_waiting=3), pod("b", num_request_waiting=0)]
    predict = load_aware(
        {"a": 900.0, "b": 950.0}, {"a": 20.0, "b": 20.0}, {"a": 0.0, "b": 0.0}, {"a": 0.2, "b": 0.0}
    )
    spread = SchedulingPolicy(picker="best_fit", strategy="most")
    assert schedule(REQUEST, pods, spread, predict).chosen == "a"
    for scorer in ("interference", "interference_queue"):
        policy = SchedulingPolicy(scorer=scorer, picker="best_fit", strategy="most")
        assert schedule(REQUEST, pods, policy, predict).chosen == "b"
    # The TPOT-only ablation does not see the queue.
    tpot_only = SchedulingPolicy(scorer="interference_tpot", picker="best_fit", strategy="most")
    assert schedule(REQUEST, pods, tpot_only, predict).chosen == "a"


def test_queue_ablation_ignores_running_requests() -> None:
    d = schedule(REQUEST, PODS, SchedulingPolicy(scorer="interference_queue", **SPREAD), PREDICT)
    assert d.chosen == "a"


def test_without_predictions_it_is_the_existing_rule() -> None:
    for seed in range(20):
        request = SchedulingRequest(2000, 1000.0, 50.0, seed=seed)
        pods = [
            pod("a", kv_cache_percentage=0.2),
            pod("b", kv_cache_percentage=0.6, num_request_waiting=3),
            pod("c", prefix_cache_score=0.5),
        ]
        ours = schedule(request, pods, SchedulingPolicy(scorer="interference"), None)
        upstream = schedule(request, pods, SchedulingPolicy(), None)
        assert ours.fallback and ours.chosen == upstream.chosen


def test_a_failing_counterfactual_call_keeps_the_headroom_decision() -> None:
    calls: list[int] = []

    def first_call_only(
        candidates: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(candidates))
        if len(calls) > 1:
            raise RuntimeError("prediction server down")
        return PREDICT(candidates, request)

    d = schedule(REQUEST, PODS, SchedulingPolicy(scorer="interference", **SPREAD), first_call_only)
    assert len(calls) == 2 and d.chosen == "a" and not d.fallback


def test_counterfactual_adds_the_uncached_prompt_and_one_request() -> None:
    busy = pod("a", num_request_waiting=2, prefix_cache_score=0.75, prefill_tokens_in_flight=100)
    after = counterfactual(busy, REQUEST)
    assert after.prefill_tokens_in_flight == 100 + 500
    assert (after.num_request_waiting, after.num_request_running) == (3, busy.num_request_running)
    assert after.dispatched_requests == busy.num_request_running + 1
    free = counterfactual(pod("b", num_request_waiting=0, dispatched_requests=2), REQUEST)
    assert (free.num_request_waiting, free.num_request_running) == (0, 5)
    assert free.dispatched_requests == 3


def test_miss_probability_is_a_probability_rising_with_the_prediction() -> None:
    p = miss_probability(np.array([10.0, 50.0, 100.0, 200.0, 1000.0]), 100.0)
    assert np.all(np.diff(p) > 0) and 0.0 < p[0] < 0.01 and p[-1] > 0.99
    assert abs(p[2] - 0.5) < 1e-9
    assert miss_probability(np.array([5000.0]), 0.0)[0] == 0.0  # no SLO, no miss


def test_unknown_scorer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown scorer"):
        SchedulingPolicy(scorer="magic")  # type: ignore[arg-type]
