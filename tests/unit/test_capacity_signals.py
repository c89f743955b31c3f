"""The pool's view from sample rows: latest gauges per pod, stale pods left out, the profile."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from backend.capacity.service import spread
from backend.capacity.signals import PoolSignals, apply
from backend.samples.models import TargetCode

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def row(id: int, pod: str | None, at: datetime, target: int = TargetCode.TTFT, **kw: Any) -> Any:
    fields: dict[str, Any] = {
        "id": id,
        "pool_id": 1,
        "target": target,
        "pod": pod,
        "observed_at": at.replace(tzinfo=None),  # as PostgreSQL's `timestamp` hands it back
        "kv_cache_percentage": 0.5,
        "num_request_waiting": 1,
        "num_request_running": 4,
        "prefill_tokens_in_flight": 100,
        "decode_tokens_in_flight": 0,
        "ms_since_last_token": 0.0,
        "oldest_prefill_wait_ms": 0.0,
        "ms_since_last_first_token": 0.0,
        "pod_type": 0,
        "pod_class": None,
        "input_token_length": 1000,
        "prefix_cache_score": 0.5,
        "num_tokens_generated": 0,
        "latency_ms": 500.0,
    }
    fields.update(kw)
    return SimpleNamespace(**fields)


def test_each_pod_keeps_its_latest_gauges_and_a_late_older_row_does_not_win() -> None:
    signals: dict[int, PoolSignals] = {}
    top = apply(
        signals,
        [
            row(1, "a", NOW - timedelta(seconds=3), num_request_running=2),
            row(2, "a", NOW - timedelta(seconds=1), num_request_running=9),
            row(3, "a", NOW - timedelta(seconds=2), num_request_running=5),  # posted late
        ],
        profile_size=10,
    )
    assert top == 3
    assert signals[1].pods["a"].num_request_running == 9


def test_a_pods_representative_request_is_placed_at_its_latest_progress() -> None:
    """The saturation level predicts its requests on each pod with the progress fields of the
    pod's latest sample (Headroom's optional wire fields; 0 from upstream's EPP)."""
    signals: dict[int, PoolSignals] = {}
    progress = {
        "ms_since_last_token": 6.0,
        "oldest_prefill_wait_ms": 120.0,
        "ms_since_last_first_token": 45.0,
    }
    apply(signals, [row(1, "a", NOW - timedelta(seconds=2)), row(2, "a", NOW, **progress)], 10)
    candidate = signals[1].pods["a"].candidate()
    assert {f: getattr(candidate, f) for f in progress} == progress


def test_a_pod_not_heard_from_is_stale_and_left_out() -> None:
    signals: dict[int, PoolSignals] = {}
    apply(
        signals,
        [row(1, "old", NOW - timedelta(seconds=31)), row(2, "new", NOW - timedelta(seconds=29))],
        profile_size=10,
    )
    fresh, stale = signals[1].fresh_pods(NOW, stale_after_s=30)
    assert [p.name for p in fresh] == ["new"]
    assert stale == ["old"]


def test_the_profile_takes_ttft_rows_as_requests_and_tpot_rows_as_output_lengths() -> None:
    signals: dict[int, PoolSignals] = {}
    apply(
        signals,
        [
            row(1, "a", NOW, input_token_length=300, prefix_cache_score=0.25),
            row(2, "a", NOW, target=TargetCode.TPOT, num_tokens_generated=120),
            row(3, None, NOW, input_token_length=700),  # unnamed pod: profile yes, gauges no
        ],
        profile_size=2,
    )
    pool = signals[1]
    assert [(r.prompt_tokens, r.prefix_cache_score) for r in pool.requests] == [
        (300, 0.25),
        (700, 0.5),
    ]
    assert list(pool.output_tokens) == [120]
    assert set(pool.pods) == {"a"}


def test_spread_picks_evenly_including_the_newest() -> None:
    assert spread(list(range(10)), 3) == [0, 4, 9]
    assert spread([1, 2], 5) == [1, 2]


def test_arrivals_are_the_ttft_rows_less_their_ttft_over_the_last_window() -> None:
    signals: dict[int, PoolSignals] = {}
    apply(
        signals,
        [
            row(1, "a", NOW - timedelta(seconds=70), latency_ms=1000.0),  # arrived 71 s ago
            row(2, "a", NOW - timedelta(seconds=30), latency_ms=2000.0),  # 32 s ago
            # Not an arrival; with no length and no TTFT sample of its prompt, no length either.
            row(3, "a", NOW - timedelta(seconds=30), target=TargetCode.TPOT, input_token_length=9),
            row(4, "a", NOW - timedelta(seconds=10), latency_ms=0.0, num_tokens_generated=0),
            row(5, "a", NOW, target=TargetCode.TPOT, num_tokens_generated=40),
            row(6, "a", NOW, target=TargetCode.TPOT, num_tokens_generated=20),
        ],
        profile_size=10,
    )
    pool = signals[1]
    arrivals = pool.recent_arrivals(NOW, window_s=60.0)
    assert arrivals.times_s == (28.0, 50.0)  # from the window's start, 60 s ago
    assert arrivals.weights == (1.0, 1.0)
    assert arrivals.output_tokens == 30.0
    assert arrivals.rate_rps == 2 / 60
    # A read cut to the newest rows: each arrival read stands for more requests.
    pool.arrival_weight = 3.0
    pool.add(row(7, "a", NOW - timedelta(seconds=5), latency_ms=0.0))
    assert pool.recent_arrivals(NOW, window_s=60.0).weights == (1.0, 1.0, 3.0)
    # A minute later, with no new sample, nothing is left to replay.
    assert pool.recent_arrivals(NOW + timedelta(seconds=60), 60.0).times_s == ()
    assert PoolSignals(10).recent_arrivals(NOW, 60.0).times_s == ()


def test_the_samples_of_the_window_are_what_the_pool_served_by_the_requests_on_its_pod() -> None:
    """Each TTFT sample: its pod's running + waiting and its seconds to the first token, kept
    by its arrival; each TPOT sample with more than one token: the same count and its seconds
    per token, kept by its observation."""
    signals: dict[int, PoolSignals] = {}
    early = NOW - timedelta(seconds=61)
    apply(
        signals,
        [
            row(1, "a", NOW - timedelta(seconds=70), latency_ms=1000.0),  # arrived 71 s ago
            row(2, "a", NOW - timedelta(seconds=30), latency_ms=2000.0, num_request_waiting=3),
            row(3, "a", early, target=TargetCode.TPOT, num_tokens_generated=3),
            row(4, "b", NOW, target=TargetCode.TPOT, latency_ms=40.0, num_tokens_generated=9),
            row(5, "b", NOW, target=TargetCode.TPOT, latency_ms=30.0, num_tokens_generated=1),
        ],
        profile_size=10,
    )
    served = signals[1].recent_arrivals(NOW, window_s=60.0).served
    assert served is not None
    assert served.ttft == ((7.0, 2.0),)  # 4 running + 3 waiting, 2 s
    assert served.tpot == ((5.0, 0.04),)  # the older one out of the window, one token no gap


def test_the_records_outcomes_are_read_back_from_the_samples() -> None:
    """A TTFT sample stands for a request that arrived its TTFT before it was observed; a TPOT
    sample for one whose first token came its decode (TPOT x the further tokens) before. An
    upstream EPP's TPOT sample carries no length (0, or 1 in some versions): matched to no TTFT
    sample (here the one TTFT sample is the first TPOT sample's request's), it is taken at its
    end."""
    signals: dict[int, PoolSignals] = {}
    apply(
        signals,
        [
            row(1, "a", NOW, latency_ms=400.0),
            row(2, "a", NOW, TargetCode.TPOT, latency_ms=20.0, num_tokens_generated=11),
            row(3, "a", NOW, TargetCode.TPOT, latency_ms=30.0, num_tokens_generated=0),
            row(4, "a", NOW, TargetCode.TPOT, latency_ms=40.0, num_tokens_generated=1),
        ],
        profile_size=10,
    )
    held = signals[1].outcomes()
    assert held.ttft_at_s.tolist() == [(NOW - timedelta(milliseconds=400)).timestamp()]
    assert (held.ttft_weight.tolist(), held.ttft_ms.tolist()) == ([1.0], [400.0])
    first = (NOW - timedelta(milliseconds=200)).timestamp()
    assert held.tpot_at_s.tolist() == [first, NOW.timestamp(), NOW.timestamp()]
    assert held.tpot_ms.tolist() == [20.0, 30.0, 40.0]
    # The replay's output length and latency still take only what a length makes known.
    assert list(signals[1].output_tokens) == [11]
    assert [s for _, _, s in signals[1].served_tpot] == [0.02]
    assert PoolSignals(10).outcomes().ttft_at_s.size == 0  # nothing held: empty, not an error


def test_an_upstream_tpot_sample_is_matched_to_its_requests_ttft_sample() -> None:
    """Upstream's EPP posts a streamed request's TTFT sample at its first token and its TPOT
    sample at its end with no length, prefix score 0 and refreshed KV and queue gauges, but the
    same pod, prompt length and dispatch-time load: the match dates its first token and gives
    its length, (end - first token) / TPOT + 1."""
    signals: dict[int, PoolSignals] = {}
    first = NOW - timedelta(seconds=10)
    upstream = {"num_tokens_generated": 0, "prefix_cache_score": 0.0, "kv_cache_percentage": 0.9}
    apply(
        signals,
        [
            row(1, "a", first - timedelta(seconds=5), num_request_running=4),  # its own TPOT lost
            row(2, "a", first, num_request_running=7),
            row(3, "b", first),  # another pod's
            # 10 s of decode at 50 ms a token after the first: 201 tokens.
            row(4, "a", NOW, TargetCode.TPOT, latency_ms=50.0, num_request_running=7, **upstream),
            # Nothing else of its pod and prompt is open: the older request, load aside.
            row(5, "a", NOW, TargetCode.TPOT, latency_ms=100.0, num_request_running=2, **upstream),
            row(6, "a", NOW, TargetCode.TPOT, latency_ms=100.0, **upstream),  # nothing left
        ],
        profile_size=10,
    )
    pool = signals[1]
    assert list(pool.output_tokens) == [201, 151]
    held = pool.outcomes()
    older = (first - timedelta(seconds=5)).timestamp()
    assert held.tpot_at_s.tolist() == [first.timestamp(), older, NOW.timestamp()]
    assert [s for _, _, s in pool.served_tpot] == [0.05, 0.1]
    assert len(pool.pairing) == 1  # pod b's request is still open
