"""What the replicas' elected helper stores in Redis reads back as the same reports."""

from __future__ import annotations

from datetime import UTC, datetime

from backend.capacity.service import PoolReport
from backend.capacity.shared import decode, encode
from backend.scheduling.saturation import Headroom, PodLevel, Saturation


def test_reports_round_trip_through_json_unchanged() -> None:
    now = datetime(2026, 12, 2, 14, 5, 1, 123456, tzinfo=UTC)
    sat = Saturation(
        level=0.1 + 0.2,  # a float with no short decimal form
        meeting_slo=0.7,
        pods=(PodLevel("pod-a", 0.25, 41.5, 9.75, 3.0), PodLevel("pod-b", 1.0, 1e-7, 2e9)),
        p50=Headroom(812, "pod-a", 158.5, None),
        p90=Headroom(4096, None, None, -3.25),
        representatives=32,
        arrival_rate_rps=6.25,
        present_level=0.2,
        next_level=None,
    )
    reports = {
        "default": PoolReport("default", "ok", now, sat, 2, ("pod-c",), 2000.0, 100.0, 3),
        "idle": PoolReport("idle", "no_slo", now, None, 0, (), None, None, None),
    }
    back, when, leader = decode(encode(reports, now, "host:42"))
    assert (back, when, leader) == (reports, now, "host:42")
    assert isinstance(back["default"].stale_pods, tuple)
    assert back["default"].saturation is not None
    assert isinstance(back["default"].saturation.pods, tuple)
