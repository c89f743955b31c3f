"""What the replicas' elected helper stores in Redis reads back as the same reports."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

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
        meeting_ttft=0.8,
        meeting_tpot=0.9,
        uncorrected_level=0.25,
        record_bias=0.05,
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


def test_a_newer_leaders_reports_are_read_whatever_fields_it_adds() -> None:
    """In a rolling upgrade a newer leader may store fields this version does not know: they
    are left out, not a failed tick on every older replica."""
    now = datetime(2026, 12, 2, 14, 5, 1, tzinfo=UTC)
    sat = Saturation(
        0.5,
        0.5,
        (PodLevel("a", 0.5, 1.0, 2.0),),
        Headroom(1, "a", 1.0, 2.0),
        Headroom(2, "a", 1.0, 2.0),
        4,
    )
    report = PoolReport("default", "ok", now, sat, 1, (), 1000.0, 50.0, 1)
    body = orjson.loads(encode({"default": report}, now, "host:1"))
    newer = body["reports"][0]
    newer["added_later"] = 1
    newer["saturation"]["added_later"] = [1, 2]
    newer["saturation"]["pods"][0]["added_later"] = None
    newer["saturation"]["p50"]["added_later"] = "x"
    back, _, _ = decode(orjson.dumps(body))
    assert back == {"default": report}
