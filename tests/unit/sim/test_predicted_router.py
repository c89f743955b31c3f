"""What the predicted-latency router puts in its candidates' wire fields."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from backend.scheduling.types import TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import LLMD_PREDICTED_BEST, OURS, make_policy
from backend.sim.routers.base import Route
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.server import Request, Server
from backend.sim.view import RouterView

from .helpers import SLO


def bound(
    name: str, pods: int = 3, count_decided: bool = False
) -> tuple[PredictedLatency, RouterView]:
    policy = make_policy(name, TransferConfig(), 0)
    assert isinstance(policy, PredictedLatency)
    if count_decided:
        policy = PredictedLatency(
            name, policy.reproduces, replace(policy.config, count_decided=True), seed=0
        )
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


def test_count_decided_counts_a_decision_from_the_moment_it_is_made_until_dispatch() -> None:
    policy, _ = bound(OURS, count_decided=True)
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


@pytest.mark.parametrize("name", [OURS, LLMD_PREDICTED_BEST])
def test_by_default_a_request_counts_only_once_dispatched(name: str) -> None:
    # Headroom's policy as the service runs it (/v1/schedule keeps no record of its decisions
    # yet) and upstream's EPP alike.
    policy, _ = bound(name)
    first = route(policy, 0, 3000)
    route(policy, 1, 100)
    assert in_flight(policy, first.pod) == (0, 0)
