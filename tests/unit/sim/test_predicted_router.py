"""What the predicted-latency router puts in its candidates' wire fields."""

from __future__ import annotations

import random

import pytest

from backend.scheduling.types import TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import LLMD_PREDICTED_BEST, OURS, make_policy
from backend.sim.routers.base import Route
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.server import Request, Server
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import RouterView

from .helpers import SLO


def bound(name: str, pods: int = 3) -> tuple[PredictedLatency, RouterView]:
    policy = make_policy(name, TransferConfig(), 0)
    assert isinstance(policy, PredictedLatency)
    specs = build_pool(pods, "a100-llama3-8b")
    servers = [Server(i, s.name, load_profile(s.profile)) for i, s in enumerate(specs)]
    view = RouterView(servers, SLO, random.Random(0), TransferConfig())
    policy.bind(view)
    return policy, view


def in_flight(policy: PredictedLatency, pod: int) -> tuple[int, int | None]:
    """(prefill tokens in flight, dispatched requests) of ``pod`` in the last route's candidates."""
    c = policy._candidates[pod]
    return c.prefill_tokens_in_flight, c.dispatched_requests


def route(policy: PredictedLatency, rid: int, prompt: int) -> Route:
    return policy.route(Request(rid, 0.0, prompt, 10, [1000 + rid], 0))


def test_headroom_counts_a_decision_from_the_moment_it_is_made_until_dispatch() -> None:
    policy, _ = bound(OURS)
    first = route(policy, 0, 3000)
    second = route(policy, 1, 100)
    # The first request is decided, its predictor call still returning: not yet dispatched.
    assert in_flight(policy, first.pod) == (first.uncached, 1)
    for rid, r in ((0, first), (1, second)):
        policy.on_dispatch(Request(rid, 0.0, 100, 10, [1000 + rid], 0), r, 0.001)
    route(policy, 2, 100)
    # From dispatch on the engine's own counts carry them (not moved in this test): counted once.
    assert in_flight(policy, first.pod) == (0, 0)
    assert in_flight(policy, second.pod) == (0, 0)


def test_upstream_counts_a_request_only_once_dispatched() -> None:
    policy, _ = bound(LLMD_PREDICTED_BEST)
    first = route(policy, 0, 3000)
    route(policy, 1, 100)
    assert in_flight(policy, first.pod) == (0, 0)


@pytest.mark.parametrize("name", [OURS, LLMD_PREDICTED_BEST])
def test_precise_prefix_score_is_the_share_of_prompt_tokens_cached(name: str) -> None:
    policy, view = bound(name)
    kv = view.servers[0].kv
    for unit in (11, 12):
        kv.allocate(UNIT_TOKENS // 16)
        kv.adopt(unit, UNIT_TOKENS // 16)
        kv.unref(unit)
    # Two of three units cached: 1,024 of 1,053 tokens, not two thirds.
    scores = policy._prefix_scores(Request(0, 0.0, 1053, 10, [11, 12, 13], 0))
    assert scores[0] == pytest.approx(1024 / 1053)
    assert scores[1:] == [0.0, 0.0]
