"""The peers as upstream ships them: prefix cap, sticky-until-saturated, LMetric, options."""

from __future__ import annotations

import random
from itertools import product

import pytest

from backend.scheduling.types import Candidate, TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import POLICIES, TUNABLE, make_policy, variants
from backend.sim.routers.base import Route, RoutingPolicy
from backend.sim.routers.heuristic import (
    UPSTREAM_PREFIX_CAP_TOKENS,
    StickyUntilSaturated,
    lmetric_keys,
)
from backend.sim.routers.predicted import candidate_row
from backend.sim.routers.prefix_index import ApproxPrefixIndex, block_share
from backend.sim.server import Request, Server
from backend.sim.view import RouterView

from .helpers import SLO, run_checked


def bind(policy: RoutingPolicy, pods: int = 4) -> RouterView:
    specs = build_pool(pods, "a100-llama3-8b")
    servers = [
        Server(i, s.name, load_profile(s.profile), role=s.role, topology=s.topology)
        for i, s in enumerate(specs)
    ]
    view = RouterView(servers, SLO, random.Random(0), TransferConfig())
    policy.bind(view)
    return view


def request(units: list[int], prompt: int, rid: int = 0) -> Request:
    return Request(rid, 0.0, prompt, 10, units, 0)


def test_upstream_prefix_cap_cannot_tell_prompts_apart_past_4096_tokens() -> None:
    capped = ApproxPrefixIndex(2, [10_000, 10_000], max_tokens=UPSTREAM_PREFIX_CAP_TOKENS)
    uncapped = ApproxPrefixIndex(2, [10_000, 10_000])
    shared = list(range(1, 9))  # 8 units of 512 tokens: exactly the first 4,096 tokens
    for index in (capped, uncapped):
        index.add(0, [*shared, 100, 101])
        index.add(1, [*shared, 200, 201])
    units, prompt = [*shared, 200, 201], 10 * 512
    assert capped.scores(units, [0, 1], prompt) == [1.0, 1.0]  # both look fully cached
    assert uncapped.scores(units, [0, 1], prompt) == [0.8, 1.0]
    # Past the cap, the tail counts as uncached on every pod.
    assert capped.uncached(units, [0, 1], prompt) == [1024, 1024]


def test_capped_scores_count_16_token_blocks() -> None:
    index = ApproxPrefixIndex(1, [100], max_tokens=UPSTREAM_PREFIX_CAP_TOKENS)
    index.add(0, [7])
    # 600 tokens = 38 blocks of 16; the cached first unit covers 32 of them.
    assert index.scores([7, 8], [0], 600) == [pytest.approx(32 / 38)]


def test_a_partial_last_unit_scores_the_tokens_it_holds() -> None:
    # 700 tokens = 44 blocks of 16; one cached 512-token unit covers 32 of them (not 1 of 2).
    assert block_share(1, 700) == pytest.approx(32 / 44)
    assert block_share(2, 700) == 1.0  # the whole prompt cached
    assert block_share(0, 700) == 0.0
    uncapped = ApproxPrefixIndex(1, [100])
    uncapped.add(0, [7])
    assert uncapped.scores([7, 8], [0], 700) == [pytest.approx(32 / 44)]


@pytest.mark.parametrize("prefix", ["approx", "precise"])
def test_predicted_routers_send_the_block_share_upstream_sends(prefix: str) -> None:
    policy = make_policy("llm-d-predicted-best", TransferConfig(), 0, {"prefix": prefix})
    view = bind(policy)
    policy.on_dispatch(request([7, 8], 700, rid=0), Route(1), 0.0)  # the index learns it
    kv = view.servers[1].kv
    kv.allocate(32)  # the pod really holds the first unit: 32 computed blocks, then cached
    kv.adopt(7, 32)
    kv.unref(7)
    scores = policy._prefix_scores(request([7, 9], 700, rid=1))  # type: ignore[attr-defined]
    assert scores[1] == pytest.approx(32 / 44)
    assert scores[0] == 0.0


def test_sticky_until_saturated_holds_affinity_until_the_in_flight_gap_passes_the_penalty() -> None:
    policy = StickyUntilSaturated(max_tokens_in_flight_penalty=10_000)
    view = bind(policy)
    units = [11, 12, 13]
    policy.on_dispatch(request(units, 1536), Route(2), 0.0)
    view.prefill_inflight[2] = 8_000  # busier than the others, within the penalty
    for _ in range(20):
        assert policy.pick(request(units, 1536), [0, 1, 2, 3]) == 2
    view.prefill_inflight[2] = 12_000  # now 12,000 tokens above the idle pods
    picks = {policy.pick(request(units, 1536), [0, 1, 2, 3]) for _ in range(40)}
    assert picks and 2 not in picks  # the gate opened and token load chose the idle pods
    assert policy.summary()["gate_broken_decisions"] == 40


def test_sticky_until_saturated_balances_cold_requests_on_in_flight_tokens() -> None:
    policy = StickyUntilSaturated()
    view = bind(policy)
    view.prefill_inflight[:] = [3_000, 500, 9_000, 2_000]
    assert policy.pick(request([99], 400), [0, 1, 2, 3]) == 1


def test_lmetric_multiplies_new_prefill_tokens_by_batch_size() -> None:
    # 1,000 new tokens x 2 running beats 100 new tokens x 30 running.
    keys = lmetric_keys([1000, 100], [2, 30])
    assert keys[0] < keys[1]
    # An idle pod scores 0 whatever its prefill; among idle pods fewer new tokens win.
    keys = lmetric_keys([5000, 4000, 10], [0, 0, 1])
    assert keys.index(min(keys)) == 1


def test_every_policy_option_is_known_and_unknown_ones_are_refused() -> None:
    for name, grid in TUNABLE.items():
        assert name in POLICIES
        combos = variants(name)
        assert combos[0] == {}
        assert len(combos) == len({tuple(sorted(c.items())) for c in combos})
        for combo in combos:
            make_policy(name, TransferConfig(), 0, combo)
        assert len(combos) == len(list(product(*grid.values())))
    with pytest.raises(ValueError, match="no option"):
        make_policy("least-request", TransferConfig(), 0, {"strategy": "most"})


@pytest.mark.parametrize("policy", ["llm-d-default", "lmetric", "llm-d-322", "lookahead-ref"])
def test_new_and_renamed_peers_serve_every_request(policy: str) -> None:
    checked = run_checked(policy, n=150, load=2.0)
    r = checked.result
    assert int((r.done == r.done).sum()) == 150  # every request completed
    assert set(checked.done_count.values()) == {1}


def test_sticky_until_saturated_under_pd_prefills_and_decodes_on_their_roles() -> None:
    checked = run_checked("llm-d-default", n=120, load=1.0, pods=4, pd="2:2")
    r = checked.result
    assert int((r.done == r.done).sum()) == 120
    roles = [s.role for s in build_pool(4, "a100-llama3-8b", "2:2")]
    assert {roles[i] for i in r.prefill_pod.tolist()} == {"prefill"}
    assert {roles[i] for i in r.pod.tolist()} == {"decode"}


def test_candidate_row_equals_the_router_row_of_the_same_pod() -> None:
    """The counterfactual pods are predicted from their wire fields; for a real candidate those
    give exactly the row the router built."""
    c = Candidate(
        name="p",
        kv_cache_percentage=0.25,
        input_token_length=900,
        num_request_waiting=2,
        num_request_running=5,
        prefix_cache_score=0.5,
        prefill_tokens_in_flight=1200,
        decode_tokens_in_flight=300,
        role="decode",
        ms_since_last_token=12.5,
        oldest_prefill_wait_ms=40.0,
        ms_since_last_first_token=90.0,
    )
    row = (0.25, 900.0, 2.0, 5.0, 0.5, 1200.0, 300.0, 1.0, 2.0, 12.5, 40.0, 90.0)
    assert candidate_row(c) == row
