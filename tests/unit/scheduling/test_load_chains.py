"""The load chains a policy can name (llm-d-default, load-prefix, lmetric), through ``schedule``:
what /v1/schedule runs, from the candidates' wire fields, with no predictor call."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from backend.scheduling import schedule
from backend.scheduling.load_chains import (
    lmetric,
    load_prefix,
    pick_extreme,
    sticky_until_saturated,
)
from backend.scheduling.types import Candidate, SchedulingPolicy, SchedulingRequest
from tests.unit.scheduling.helpers import pod


def never(_: Sequence[Candidate], __: SchedulingRequest) -> tuple[list[float], list[float]]:
    raise AssertionError("a load chain must not call the predictor")


STICKY = SchedulingPolicy(chain="llm-d-default", max_tokens_in_flight_penalty=10_000)


def test_sticky_chain_keeps_the_pods_holding_the_prompt_while_the_load_gap_is_small() -> None:
    pods = [
        pod("a", prefix_cache_score=0.9, prefill_tokens_in_flight=8_000),
        pod("b", prefix_cache_score=0.1, prefill_tokens_in_flight=0),
        pod("c", prefix_cache_score=0.0, prefill_tokens_in_flight=100),
    ]
    d = schedule(SchedulingRequest(prompt_tokens=2000, seed=1), pods, STICKY, never)
    assert d.admitted and d.chosen == "a" and not d.fallback
    assert d.mode == "llm-d-default" and d.picker == "max-score-picker"
    gate = d.steps[0]
    assert gate.plugin == "prefix-cache-affinity-filter"
    assert gate.outcome == "sticky" and gate.kept == 1
    removed = {c.name: c.removed_by for c in d.candidates}
    assert removed == {"a": None, "b": "prefix-cache-affinity-filter", "c": removed["b"]}
    # a: 8,000 in flight + 200 uncached (10 % of 2,000 not cached).
    assert next(c.score for c in d.candidates if c.name == "a") == 8_200


def test_sticky_chain_breaks_affinity_past_the_penalty_and_takes_the_fewest_tokens() -> None:
    pods = [
        pod("a", prefix_cache_score=0.9, prefill_tokens_in_flight=12_000),
        pod("b", prefix_cache_score=0.1, prefill_tokens_in_flight=0),
        pod("c", prefix_cache_score=0.0, prefill_tokens_in_flight=100),
    ]
    d = schedule(SchedulingRequest(prompt_tokens=2000, seed=1), pods, STICKY, never)
    assert d.steps[0].outcome == "broken" and d.chosen == "b"
    scores = {c.name: c.score for c in d.candidates}
    assert scores == {"a": 12_200, "b": 1_800, "c": 2_100}
    # A penalty of 0 switches the load gate off: affinity holds however busy the pod.
    off = SchedulingPolicy(chain="llm-d-default", max_tokens_in_flight_penalty=0)
    d = schedule(SchedulingRequest(prompt_tokens=2000, seed=1), pods, off, never)
    assert d.chosen == "a" and d.steps[0].outcome == "sticky"


def test_sticky_chain_without_a_sticky_pod_balances_on_tokens_capped_at_the_threshold() -> None:
    policy = SchedulingPolicy(chain="llm-d-default", queue_threshold_tokens=5_000)
    choice = sticky_until_saturated(
        [0.0, 0.0, 0.0],
        [9_000, 4_000, 6_000],
        lambda kept: [500 for _ in kept],
        policy,
        random.Random(0),
    )
    assert choice.outcome == "no_match" and choice.kept == (0, 1, 2)
    # 9,500 and 6,500 are both capped at 5,000, as is 4,500 not: pod 1 wins alone.
    assert choice.values == (5_000.0, 4_500.0, 5_000.0) and choice.index == 1


def test_load_prefix_chain_is_the_weighted_sum_of_queue_kv_and_prefix() -> None:
    policy = SchedulingPolicy(chain="load-prefix")  # queue 2, kv 2, prefix 3
    pods = [
        pod("a", num_request_waiting=4, kv_cache_percentage=0.2, prefix_cache_score=0.0),
        pod("b", num_request_waiting=0, kv_cache_percentage=0.9, prefix_cache_score=0.5),
        pod("c", num_request_waiting=2, kv_cache_percentage=0.5, prefix_cache_score=0.0),
    ]
    d = schedule(SchedulingRequest(prompt_tokens=1000, seed=3), pods, policy, never)
    scores = {c.name: c.score for c in d.candidates}
    assert scores == pytest.approx({"a": 1.6, "b": 2.0 + 0.2 + 1.5, "c": 1.0 + 1.0})
    assert d.chosen == "b"
    prefix_only = SchedulingPolicy(
        chain="load-prefix", load_prefix_queue_weight=0, load_prefix_kv_weight=1
    )
    # Equal queues: every pod gets queue score 1.
    choice = load_prefix([3, 3], [0.5, 0.1], [0.0, 0.0], prefix_only, random.Random(0))
    assert choice.values == pytest.approx((0.5, 0.9)) and choice.index == 1


def test_lmetric_chain_prices_new_prefill_tokens_by_batch_size() -> None:
    pods = [
        # 1,000 uncached x 2 in flight beats 100 uncached x 30 in flight.
        pod("a", prefix_cache_score=0.0, dispatched_requests=2, num_request_running=40),
        pod("b", prefix_cache_score=0.9, dispatched_requests=30, num_request_running=1),
    ]
    request = SchedulingRequest(prompt_tokens=1000, seed=0)
    d = schedule(request, pods, SchedulingPolicy(chain="lmetric"), never)
    assert d.chosen == "a" and d.steps[0].plugin == "lmetric-scorer"
    # The scraped running gauge instead of the router's count turns it round.
    scraped = SchedulingPolicy(chain="lmetric", lmetric_batch="scraped")
    assert schedule(request, pods, scraped, never).chosen == "b"


def test_lmetric_pending_counts_tokens_already_waiting_for_prefill() -> None:
    pods = [
        pod("a", prefix_cache_score=0.5, dispatched_requests=1, prefill_tokens_in_flight=9_000),
        pod("b", prefix_cache_score=0.0, dispatched_requests=1, prefill_tokens_in_flight=0),
    ]
    request = SchedulingRequest(prompt_tokens=1000, seed=0)
    assert schedule(request, pods, SchedulingPolicy(chain="lmetric"), never).chosen == "b"
    alone = SchedulingPolicy(chain="lmetric", lmetric_pending=False)
    assert schedule(request, pods, alone, never).chosen == "a"


def test_idle_pods_tie_on_lmetric_and_fewer_new_tokens_win() -> None:
    choice = lmetric([5000, 4000, 10], [0, 0, 1], random.Random(0))
    assert choice.index == 1


def test_ties_are_broken_at_random_and_reproducibly_by_seed() -> None:
    pods = [pod(n) for n in "abcdef"]  # identical: every chain ties on all of them
    for chain in ("llm-d-default", "load-prefix", "lmetric"):
        policy = SchedulingPolicy(chain=chain)  # type: ignore[arg-type]
        chosen = {
            schedule(SchedulingRequest(prompt_tokens=100, seed=s), pods, policy, never).chosen
            for s in range(40)
        }
        assert len(chosen) > 1, chain
        again = [
            schedule(SchedulingRequest(prompt_tokens=100, seed=7), pods, policy, never).chosen
            for _ in range(3)
        ]
        assert len(set(again)) == 1
    # One draw only when there is a tie (the simulator's seeded runs depend on it).
    rng = random.Random(5)
    assert pick_extreme([3.0, 1.0, 2.0], rng, lowest=True) == 1
    assert rng.random() == random.Random(5).random()


def test_under_pd_the_default_chain_picks_prefill_by_tokens_and_decode_by_requests() -> None:
    pods = [
        pod("p1", role="prefill", prefill_tokens_in_flight=5_000),
        pod("p2", role="prefill", prefill_tokens_in_flight=100),
        pod("d1", role="decode", dispatched_requests=9),
        pod("d2", role="decode", dispatched_requests=2),
    ]
    policy = SchedulingPolicy(chain="llm-d-default")
    d = schedule(SchedulingRequest(prompt_tokens=500, seed=0), pods, policy, never)
    assert (d.prefill, d.decode, d.chosen) == ("p2", "d2", "d2")
    assert {c.name: c.profile for c in d.candidates} == {
        "p1": "prefill",
        "p2": "prefill",
        "d1": "decode",
        "d2": "decode",
    }
    assert "active-request-scorer" in [s.plugin for s in d.steps]
    lm = schedule(
        SchedulingRequest(prompt_tokens=500, seed=0), pods, SchedulingPolicy(chain="lmetric"), never
    )
    assert lm.prefill in ("p1", "p2") and lm.decode == "d2"


def test_the_policy_refuses_impossible_chain_parameters() -> None:
    with pytest.raises(ValueError, match="chain"):
        SchedulingPolicy(chain="round-robin")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sticky_affinity_threshold"):
        SchedulingPolicy(chain="llm-d-default", sticky_affinity_threshold=1.5)
    with pytest.raises(ValueError, match="max_tokens_in_flight_penalty"):
        SchedulingPolicy(max_tokens_in_flight_penalty=-1)
    with pytest.raises(ValueError, match="above 0"):
        SchedulingPolicy(
            chain="load-prefix",
            load_prefix_queue_weight=0,
            load_prefix_kv_weight=0,
            load_prefix_prefix_weight=0,
        )
    with pytest.raises(ValueError, match="lmetric_batch"):
        SchedulingPolicy(lmetric_batch="gauge")  # type: ignore[arg-type]
