"""What the predicted-latency router puts in its candidates' wire fields."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from backend.scheduling.types import TransferConfig
from backend.settings import DECIDED_HOLD_MS
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import LLMD_PREDICTED_BEST, OURS, make_policy
from backend.sim.routers.base import Route
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.server import Request, Seq, Server
from backend.sim.view import RouterView

from .helpers import SLO


def bound(
    name: str, pods: int = 3, hold_ms: float | None = None
) -> tuple[PredictedLatency, RouterView]:
    policy = make_policy(name, TransferConfig(), 0)
    assert isinstance(policy, PredictedLatency)
    if hold_ms is not None:
        policy = PredictedLatency(
            name, policy.reproduces, replace(policy.config, decided_hold_ms=hold_ms), seed=0
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


def test_a_decision_counts_from_the_moment_it_is_made_until_its_hold_ends() -> None:
    policy, view = bound(OURS, hold_ms=5.0)
    first = route(policy, 0, 3000)
    route(policy, 1, 100)
    # The first request is decided, not yet dispatched: the second decision sees it.
    assert in_flight(policy, first.pod) == (first.uncached, 1)
    view.now = 0.005  # the hold is over; the engine's own counts carry it from dispatch on
    route(policy, 2, 100)
    assert in_flight(policy, first.pod) == (0, 0)


def test_headroom_holds_its_decisions_as_schedule_does_and_upstream_does_not() -> None:
    ours, _ = bound(OURS)
    assert ours.config.decided_hold_ms == DECIDED_HOLD_MS > 0
    first = route(ours, 0, 3000)
    route(ours, 1, 100)
    assert in_flight(ours, first.pod) == (first.uncached, 1)
    # Upstream's EPP counts a request only once it is dispatched.
    upstream, _ = bound(LLMD_PREDICTED_BEST)
    first = route(upstream, 0, 3000)
    route(upstream, 1, 100)
    assert in_flight(upstream, first.pod) == (0, 0)


def test_headroom_sends_the_pods_progress_and_upstream_sends_none() -> None:
    """Headroom's router sends ``ms_since_last_token``, ``oldest_prefill_wait_ms`` and
    ``ms_since_last_first_token`` (its optional wire fields); upstream's EPP does not, so its
    rows and candidates carry 0."""
    for name, sends in ((OURS, True), (LLMD_PREDICTED_BEST, False)):
        policy, view = bound(name, pods=1)
        assert policy.config.send_progress is sends
        view.dispatched[0] = 1
        view.prefill_since[0][7] = 0.0
        view.first_token_at[0] = 0.001  # an earlier request's prefill ended 1 ms after
        view.servers[0].enqueue(Seq(Request(7, 0.0, 3000, 10, [7], 0)), 0.0)
        view.now = 0.004
        route(policy, 0, 100)
        c = policy._candidates[0]
        sent = (pytest.approx(4.0), pytest.approx(4.0), pytest.approx(3.0))
        expected = sent if sends else (0.0, 0.0, 0.0)
        assert (c.ms_since_last_token, c.oldest_prefill_wait_ms, c.ms_since_last_first_token) == (
            expected
        )
        assert policy._cols is not None
        fields = ("ms_since_last_token", "oldest_prefill_wait_ms", "ms_since_last_first_token")
        assert tuple(policy._cols[f][0] for f in fields) == expected
