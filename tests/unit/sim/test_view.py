"""What the simulated router reads of a pod: scraped gauges, or (measurement only) the present."""

from __future__ import annotations

import pytest

from backend.sim.server import FirstToken, Outcome, Request, Seq

from .helpers import enqueue_at, view


def test_a_scrape_shows_the_pod_as_it_stood_at_the_last_scrape() -> None:
    v = view(0.05)
    v.phases = [0.0]
    enqueue_at(v, 0.101, 3)
    v.now = 0.12  # last scrape at 0.10, before the arrivals
    assert v.scraped(0).num_running + v.scraped(0).num_waiting == 0
    v.now = 0.151
    assert v.scraped(0).num_running + v.scraped(0).num_waiting == 3


def test_interval_zero_reads_the_present_gauges() -> None:
    v = view(0.0)
    enqueue_at(v, 0.101, 3)
    v.now = 0.101
    present = v.servers[0].metrics()
    assert v.scraped(0) == present
    assert present.num_running + present.num_waiting == 3


def test_progress_is_what_a_router_proxying_the_streams_sees() -> None:
    """``ms_since_last_token``: since the pod's last streamed token (or since it became busy);
    ``oldest_prefill_wait_ms``: since the oldest request still before its first token was
    dispatched; ``ms_since_last_first_token``: since the pod's last first token (0 before its
    first). All 0 with nothing in flight."""
    v = view(0.05)
    server = v.servers[0]
    assert v.progress(0) == (0.0, 0.0, 0.0)
    # A request reaches the idle pod at 1 s, as the engine dispatches it.
    v.dispatched[0] += 1
    v.prefill_since[0][0] = 1.0
    first_iteration_end = server.enqueue(Seq(Request(0, 1.0, 500, 50, [], 0)), 1.0)
    assert first_iteration_end is not None
    v.now = (1.0 + first_iteration_end) / 2  # inside the prefill: nothing streamed yet
    since, oldest, since_first = v.progress(0)
    assert since == pytest.approx((v.now - 1.0) * 1000)
    assert oldest == pytest.approx((v.now - 1.0) * 1000)
    assert since_first == 0.0  # no prefill has finished on this pod yet
    # The prefill ends with the first token; the engine stops counting the request's wait and
    # dates the pod's last first token.
    out: list[Outcome] = []
    server.advance(first_iteration_end, out)
    assert any(isinstance(o, FirstToken) for o in out)
    del v.prefill_since[0][0]
    v.first_token_at[0] = first_iteration_end
    # Decoding now: a token is streamed at every iteration's end. Between the second and the
    # third, the last token streamed is the second's.
    ends = server._ends[: server._steps]
    assert len(ends) >= 3
    v.now = (ends[1] + ends[2]) / 2
    since, oldest, since_first = v.progress(0)
    assert since == pytest.approx((v.now - ends[1]) * 1000)
    assert oldest == 0.0
    assert since_first == pytest.approx((v.now - first_iteration_end) * 1000)
    # Once the router has no request on the pod, there is no progress to report.
    v.dispatched[0] = 0
    assert v.progress(0) == (0.0, 0.0, 0.0)
