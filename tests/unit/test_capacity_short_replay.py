"""Desired replicas replays its lookback's newest part too and answers the larger count."""

from __future__ import annotations

from backend.capacity.desired import estimate, short_rows
from backend.settings import CapacitySettings
from backend.sim.autoscale import step, warp
from backend.sim.fromsamples import SampleRow, record, rows_from_observations
from backend.sim.replay import DEFAULT_SLO
from backend.sim.traces import load_trace

EPOCH = 1_764_000_000.0  # the service's sample times are epoch seconds


def _level(seconds: float) -> list[SampleRow]:
    """One TTFT sample a second for ``seconds``."""
    return [
        SampleRow("ttft", EPOCH + t + 0.1, 100.0, 500, 0.0, "p0", key=(float(t),))
        for t in range(int(seconds))
    ]


def test_the_short_replay_is_the_newest_seconds_and_none_where_it_is_the_whole() -> None:
    rows = _level(300.0)
    newest = short_rows(rows, 120.0)
    assert newest is not None
    assert min(r.time_s for r in newest) >= max(r.time_s for r in rows) - 120.0
    assert len(newest) == 121  # the sample 120 s before the newest is in
    assert short_rows(rows, 0.0) is None  # turned off
    assert short_rows(rows[-100:], 120.0) is None  # the lookback is no longer than it


def test_a_burst_in_the_newest_minute_asks_for_more_pods_than_the_whole_lookback() -> None:
    # Mooncake at 0.2x its rate for four minutes, then 0.6x (the autoscaling loop's step) for a
    # minute, on three pods: the target is out of reach (some prompts alone outlast the 2 s
    # TTFT), so each replay answers its plateau's start, and the newest 120 s, three quarters of
    # them the burst's, put it at more pods than the 300 s, under half of them (19 and 24).
    trace = warp(load_trace("mooncake-conversation"), step(0.2, 0.6, 240.0, 60.0), 300.0)
    _, observations = record(trace, 3, "a100-llama3-8b", "least-request", DEFAULT_SLO)
    rows = rows_from_observations(observations)
    answers = {}
    for seconds in (0.0, 120.0):
        settings = CapacitySettings(
            desired_short_replay_s=seconds,
            desired_router="least-request",
            desired_max_replicas=24,
        )
        est = estimate(rows, DEFAULT_SLO, 0.95, settings)
        assert est is not None
        answers[seconds] = est
    one, both = answers[0.0], answers[120.0]
    assert not one.met and not both.met
    assert both.replicas > one.replicas
    # The larger answer is the short replay's: the newest 120 s of requests, not all of them.
    assert len(both.workload.trace) < len(one.workload.trace) == len(trace)
    assert both.simulations > one.simulations  # both replays ran
