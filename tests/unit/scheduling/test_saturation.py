"""Saturation from predictions: levels in [0, 1], rising as pods fill, the chain's pick."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.predictor.calibration import Calibration, fit_calibration, meet_probability
from backend.scheduling.saturation import (
    Arrivals,
    MeetProbability,
    Representative,
    Saturation,
    Served,
    decode_wait_ms,
    latency_requests,
    project,
    role_replicas,
    saturation,
    saturation_replicas,
    scaled,
)
from backend.scheduling.types import Candidate, FloatArray, SchedulingPolicy
from tests.unit.scheduling.helpers import pod

POLICY = SchedulingPolicy()
REQUESTS = [Representative(p, 0.0) for p in (200, 500, 1000, 2000, 4000, 8000)]


def linear(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
    """A monotone model: latency grows with every load gauge and with the prompt."""
    ttft = np.array(
        [
            20
            + 0.05 * r.input_token_length
            + 30 * r.num_request_waiting
            + 4 * r.num_request_running
            + 100 * r.kv_cache_percentage
            + 0.01 * r.prefill_tokens_in_flight
            for r in rows
        ]
    )
    tpot = np.array([8 + 0.5 * r.num_request_running + 10 * r.kv_cache_percentage for r in rows])
    return ttft, tpot


def _spread(cal: Calibration | None) -> MeetProbability:
    """The chance of meeting both SLOs by ``cal`` at each row's load, as the service builds it."""

    def meet(
        rows: Sequence[Candidate],
        ttft: FloatArray,
        tpot: FloatArray,
        ttft_slo: float | None,
        tpot_slo: float | None,
    ) -> FloatArray:
        load = [r.num_request_running + r.num_request_waiting for r in rows]
        return meet_probability(load, ttft, tpot, ttft_slo, tpot_slo, cal, cal)

    return meet


def _one_band(log_sd: float, seed: int = 0) -> Calibration:
    """A spread that is the same at every load: ratios log-normal with ``log_sd``."""
    rng = np.random.default_rng(seed)
    mean = np.full(4000, 100.0)
    cal = fit_calibration(
        np.zeros(4000), mean * np.exp(rng.normal(0.0, log_sd, 4000)), mean, bands=1
    )
    assert cal is not None
    return cal


def test_an_idle_pool_is_not_saturated_and_a_full_one_is() -> None:
    idle = [
        pod(n, num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0) for n in "ab"
    ]
    full = [
        pod(n, num_request_running=60, num_request_waiting=40, kv_cache_percentage=1.0)
        for n in "ab"
    ]
    calm = saturation(idle, REQUESTS, POLICY, 1000.0, 50.0, linear)
    assert calm.level == 0.0 and calm.meeting_slo == 1.0
    assert [p.level for p in calm.pods] == [0.0, 0.0]
    busy = saturation(full, REQUESTS, POLICY, 1000.0, 50.0, linear)
    assert busy.level == 1.0
    assert [p.level for p in busy.pods] == [1.0, 1.0]


def test_pod_level_is_the_share_of_requests_that_miss_there() -> None:
    # On this pod TTFT = 20 + 0.05 * prompt: 1000 ms is crossed at a prompt of 19,600 tokens;
    # with a 300 ms SLO, prompts of 5,600 tokens and more miss: 1 request of 6.
    quiet = pod("a", num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0)
    sat = saturation([quiet], REQUESTS, POLICY, 300.0, 50.0, linear)
    assert sat.pods[0].level == pytest.approx(1 / 6)
    assert sat.level == pytest.approx(1 / 6)  # one pod: the chain has no other choice


def test_the_pool_level_counts_what_the_chain_picks_not_the_worst_pod() -> None:
    good = pod("good", num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0)
    bad = pod("bad", num_request_running=60, num_request_waiting=40, kv_cache_percentage=1.0)
    sat = saturation([good, bad], REQUESTS, POLICY, 1000.0, 50.0, linear)
    assert {p.name: p.level for p in sat.pods} == {"good": 0.0, "bad": 1.0}
    assert sat.level == 0.0  # every request fits on the pod the tier filter keeps


def test_headroom_is_slo_minus_prediction_on_the_picked_pod_at_median_and_p90() -> None:
    a = pod("a", num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0)
    sat = saturation([a], REQUESTS, POLICY, 1000.0, 50.0, linear)
    # Sorted prompts 200..8000: the median position of 6 is index 3 (2000), p90 index 5 (8000).
    assert (sat.p50.prompt_tokens, sat.p90.prompt_tokens) == (2000, 8000)
    assert sat.p50.pod == "a"
    assert sat.p50.ttft_headroom_ms == pytest.approx(1000 - (20 + 0.05 * 2000))
    assert sat.p90.ttft_headroom_ms == pytest.approx(1000 - (20 + 0.05 * 8000))
    assert sat.p50.tpot_headroom_ms == pytest.approx(50 - 8)


def test_it_needs_pods_and_requests() -> None:
    with pytest.raises(ValueError):
        saturation([], REQUESTS, POLICY, 100.0, 10.0, linear)
    with pytest.raises(ValueError):
        saturation([pod("a")], [], POLICY, 100.0, 10.0, linear)


def _loaded_pods(start: list[tuple[int, int, float, int]]) -> list[Candidate]:
    """Pods p0, p1, ... with (running, waiting, KV share, prefill tokens in flight) each."""
    return [
        pod(
            f"p{i}",
            num_request_running=r,
            num_request_waiting=w,
            kv_cache_percentage=kv,
            prefill_tokens_in_flight=f,
        )
        for i, (r, w, kv, f) in enumerate(start)
    ]


def _filled(pods: list[Candidate], more: list[tuple[int, int, float, int]]) -> list[Candidate]:
    """``pods`` with more load on each: (running, waiting, KV share, prefill tokens) added."""
    return [
        dataclasses.replace(
            p,
            num_request_running=p.num_request_running + dr,
            num_request_waiting=p.num_request_waiting + dw,
            kv_cache_percentage=min(1.0, p.kv_cache_percentage + dkv),
            prefill_tokens_in_flight=p.prefill_tokens_in_flight + df,
        )
        for p, (dr, dw, dkv, df) in zip(pods, more, strict=False)
    ]


load = st.tuples(
    st.integers(0, 40), st.integers(0, 20), st.floats(0.0, 1.0), st.integers(0, 20_000)
)


@settings(max_examples=60, deadline=None)
@given(
    start=st.lists(load, min_size=1, max_size=5),
    more=st.lists(load, min_size=5, max_size=5),
    prompts=st.lists(st.integers(1, 16_000), min_size=1, max_size=12),
    ttft_slo=st.floats(50.0, 3000.0),
    tpot_slo=st.floats(9.0, 60.0),
    strategy=st.sampled_from(["least", "most"]),
    log_sd=st.sampled_from([None, 0.0, 0.1, 0.4]),
)
def test_saturation_rises_monotonically_as_pods_fill(
    start: list[tuple[int, int, float, int]],
    more: list[tuple[int, int, float, int]],
    prompts: list[int],
    ttft_slo: float,
    tpot_slo: float,
    strategy: str,
    log_sd: float | None,
) -> None:
    """Adding load to any pod never lowers a pod's level or the pool's: by the 0/1 rule (None)
    and by the chance of missing with a spread that is the same at every load. (A spread that
    widens with load can raise the chance of a pod already past its SLO as it fills: its
    wider spread reaches further under the SLO. docs/capacity.md.)

    The pool's level is held to it by the 0/1 rule only. By the chance of missing it is not
    monotone: the chain routes on the means, so when a pod fills and leaves the positive tier a
    request can move to a pod where its chance of missing is lower (found by Hypothesis under
    ``least``: 0.48 -> 0.125, the picked pod's TTFT headroom 0.95 ms -> 31 ms, and under other
    draws with both strategies). Each pod's level is monotone either way."""
    meet = None if log_sd is None else _spread(_one_band(log_sd))
    pods = _loaded_pods(start)
    fuller = _filled(pods, more)
    requests = [Representative(p, 0.0) for p in prompts]
    policy = SchedulingPolicy(strategy=strategy)  # type: ignore[arg-type]
    before = saturation(pods, requests, policy, ttft_slo, tpot_slo, linear, meet)
    after = saturation(fuller, requests, policy, ttft_slo, tpot_slo, linear, meet)
    if meet is None:
        assert after.level >= before.level
    for b, a in zip(before.pods, after.pods, strict=True):
        assert a.level >= b.level


def test_a_pod_the_chain_picks_at_exactly_its_slo_counts_as_meeting() -> None:
    """Found by Hypothesis: one busy pod predicted at exactly the TPOT SLO (8 + 0.5 x 34 = 25 ms)
    beside idle ones. The chain's tier counts it positive (headroom >= 0) and ``least`` packs
    the request there; counted as a miss (strictly under, upstream's IsValid), the pool read 1,
    and filling that pod's KV (it leaves the tier) lowered the pool to 0. The level counts a
    prediction at the SLO as meeting, as the tier does, so the pool's level cannot fall."""
    busy = [pod(f"p{i}", num_request_running=0, num_request_waiting=0) for i in range(3)]
    busy.append(pod("p3", num_request_running=34, num_request_waiting=0, kv_cache_percentage=0.0))
    fuller = [*busy[:3], dataclasses.replace(busy[3], kv_cache_percentage=1.0)]
    least = SchedulingPolicy(strategy="least")
    one = [Representative(1, 0.0)]
    before = saturation(busy, one, least, 157.0, 25.0, linear)
    after = saturation(fuller, one, least, 157.0, 25.0, linear)
    assert before.p50.pod == "p3" and before.p50.tpot_headroom_ms == 0.0
    assert before.level == 0.0 and after.level == 0.0
    for meet in (_spread(_one_band(0.0)), None):
        assert saturation(busy, one, least, 157.0, 25.0, linear, meet).pods[3].level == 0.0


def test_with_no_spread_the_probability_rule_is_the_zero_one_rule() -> None:
    pods = [
        pod("a", num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0),
        pod("b", num_request_running=20, num_request_waiting=10, kv_cache_percentage=0.7),
    ]
    exact = _one_band(0.0)
    for ttft_slo, tpot_slo in ((300.0, 50.0), (1000.0, 20.0), (600.0, 30.0)):
        plain = saturation(pods, REQUESTS, POLICY, ttft_slo, tpot_slo, linear)
        spread = saturation(pods, REQUESTS, POLICY, ttft_slo, tpot_slo, linear, _spread(exact))
        assert spread == plain


def test_a_request_whose_mean_just_fits_counts_as_half_missing() -> None:
    """Near the SLO the 0/1 rule counts every request whose mean fits as meeting; with a
    symmetric spread about half of those whose mean sits at the SLO miss."""
    a = pod("a", num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0)
    one = [Representative(2000, 0.0)]
    mean = 20 + 0.05 * 2000  # this request's TTFT on the idle pod
    plain = saturation([a], one, POLICY, mean * 1.001, None, linear)
    assert plain.level == 0.0
    spread = saturation([a], one, POLICY, mean * 1.001, None, linear, _spread(_one_band(0.2)))
    assert 0.4 <= spread.level <= 0.6
    assert spread.pods[0].level == spread.level
    # Far under the SLO it meets, far over it misses, either way.
    assert (
        saturation([a], one, POLICY, mean * 3, None, linear, _spread(_one_band(0.2))).level < 0.01
    )
    assert (
        saturation([a], one, POLICY, mean / 3, None, linear, _spread(_one_band(0.2))).level > 0.99
    )


# The next interval: the recent arrivals replayed onto the pods.

IDLE = [pod(n, num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0) for n in "ab"]
MIDDLING = [
    pod("a", num_request_running=3, num_request_waiting=1, kv_cache_percentage=0.3),
    pod("b", num_request_running=1, num_request_waiting=0, kv_cache_percentage=0.1),
]
ONE = [Representative(2000, 0.0)]


def _arrivals(times: Sequence[float], weights: Sequence[float] | None = None) -> Arrivals:
    return Arrivals(tuple(times), 60.0, 11.0, tuple(weights) if weights is not None else None)


def test_the_replays_latency_requests_are_the_midpoint_quantiles_of_the_prompts() -> None:
    """Their mean stands for the requests' mean: neither the shortest nor the longest prompt,
    each of which stands for half a step of the distribution, is taken as a whole one."""
    many = [Representative(p, 0.0) for p in range(32, 0, -1)]  # unsorted on purpose
    assert [r.prompt_tokens for r in latency_requests(many)] == [3, 7, 11, 15, 19, 23, 27, 31]
    few = [Representative(p, 0.0) for p in (500, 100, 300)]
    assert [r.prompt_tokens for r in latency_requests(few)] == [100, 300, 500]
    # A long tail: the longest of 32, 100 times the rest, is not one of the picks (evenly
    # spaced from the shortest to the longest, it was, at an eighth of the mean).
    tail = [Representative(1000, 0.0)] * 31 + [Representative(100_000, 0.0)]
    assert [r.prompt_tokens for r in latency_requests(tail)] == [1000] * 8


def test_with_no_arrivals_the_level_is_the_present_one() -> None:
    for pods in (IDLE, MIDDLING):
        present = saturation(pods, REQUESTS, POLICY, 400.0, 20.0, linear)
        replayed = saturation(pods, REQUESTS, POLICY, 400.0, 20.0, linear, None, _arrivals([]))
        assert replayed == present
        assert replayed.arrival_rate_rps == 0.0
    assert project(MIDDLING, REQUESTS, _arrivals([]), linear) == []


def test_a_burst_finds_the_requests_ahead_of_it_and_spaced_arrivals_find_the_pods_drained() -> None:
    # On an idle pod the request's TTFT is 120 ms; each request in the system adds 4 ms of
    # running load and its 2,000 prompt tokens in flight (20 ms): 150 ms is crossed at 2 ahead.
    present = saturation(IDLE, ONE, POLICY, 150.0, None, linear)
    assert present.level == 0.0
    burst = saturation(IDLE, ONE, POLICY, 150.0, None, linear, None, _arrivals([5.0] * 20))
    # 20 at once over 2 pods: the arrivals find 0, 0.5, ..., 9.5 requests ahead on each pod;
    # the states at their 1/8, 3/8, 5/8 and 7/8 quantiles hold 1, 3.5, 6 and 8.5.
    assert [p.requests for p in burst.pods] == [6.0, 6.0]  # the middle state's
    assert burst.level == pytest.approx(0.75)  # all but the first have 2 or more ahead
    assert burst.arrival_rate_rps == pytest.approx(20 / 60)
    # The same 20 requests 3 s apart: each has left (about 0.2 s) before the next comes.
    spaced = saturation(
        IDLE, ONE, POLICY, 150.0, None, linear, None, _arrivals([3.0 * k for k in range(20)])
    )
    assert spaced.level == 0.0
    assert all(p.requests < 1e-3 for p in spaced.pods)


def test_the_mix_weighs_the_present_level_against_the_next_intervals() -> None:
    burst = _arrivals([5.0] * 20)
    present = saturation(IDLE, ONE, POLICY, 150.0, None, linear)
    replayed = saturation(IDLE, ONE, POLICY, 150.0, None, linear, None, burst)
    mixed = saturation(IDLE, ONE, POLICY, 150.0, None, linear, None, burst, present_weight=0.6)
    # Both parts are kept, whatever the weight: 0 now, 0.75 over the next interval (above).
    assert (replayed.present_level, replayed.next_level) == (0.0, pytest.approx(0.75))
    assert (mixed.present_level, mixed.next_level) == (0.0, pytest.approx(0.75))
    assert mixed.level == pytest.approx(0.4 * 0.75) and mixed.meeting_slo == 1.0 - mixed.level
    for p, r in zip(mixed.pods, replayed.pods, strict=True):
        assert p.level == pytest.approx(0.4 * r.level)
    # The rest is "if routed now": the present state's requests and headroom.
    assert [p.requests for p in mixed.pods] == [0.0, 0.0]
    assert mixed.p50 == present.p50 and mixed.arrival_rate_rps == pytest.approx(20 / 60)
    # All the weight on the present: no replay at all.
    assert saturation(IDLE, ONE, POLICY, 150.0, None, linear, None, burst, 1.0) == present
    assert present.next_level is None
    with pytest.raises(ValueError, match="present_weight"):
        saturation(IDLE, ONE, POLICY, 150.0, None, linear, None, burst, 1.5)


def test_a_standing_queue_drains_before_a_late_arrival() -> None:
    late = _arrivals([59.0])  # the present requests have long left by then
    prefilling = [dataclasses.replace(p, prefill_tokens_in_flight=5000) for p in MIDDLING]
    for state, held in project(prefilling, REQUESTS, late, linear):
        assert list(held) == pytest.approx([0.0, 0.0], abs=1e-6)
        assert [(p.num_request_running, p.num_request_waiting) for p in state] == [(0, 0)] * 2
        # Their prompts left with them: not counted beside the replayed requests'.
        assert [p.prefill_tokens_in_flight for p in state] == [0, 0]
    # At once, the present requests are all there, with their prompts in prefill.
    for state, _ in project(prefilling, REQUESTS, _arrivals([0.0]), linear):
        assert [p.prefill_tokens_in_flight for p in state] == [5000, 5000]
    assert saturation(MIDDLING, REQUESTS, POLICY, 400.0, 20.0, linear, None, late).level <= (
        saturation(MIDDLING, REQUESTS, POLICY, 400.0, 20.0, linear).level
    )


def test_a_latency_the_models_cannot_give_holds_every_arrival() -> None:
    def unknown(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
        ttft, tpot = linear(rows)
        return np.full_like(ttft, np.nan), tpot

    states = project(IDLE, ONE, _arrivals([0.0, 10.0, 20.0, 30.0]), unknown)
    # No departures: the k-th arrival finds the k before it, half a request each per pod.
    held = [list(h) for _, h in states]
    assert held == [pytest.approx([k / 2] * 2, abs=1e-3) for k in range(4)]
    # and each still before its first token (the model gives no TTFT to pass it).
    assert [s[0].prefill_tokens_in_flight for s, _ in states] == [0, 1000, 2000, 3000]


def test_weights_stand_for_arrivals_not_read() -> None:
    one_each = project(IDLE, ONE, _arrivals([1.0] * 8), linear)
    two_each = project(IDLE, ONE, _arrivals([1.0] * 4, [2.0] * 4), linear)
    assert _arrivals([1.0] * 4, [2.0] * 4).rate_rps == _arrivals([1.0] * 8).rate_rps
    # The same 8 requests in a burst; read as 4, each standing for 2, they find about as much.
    for (_, a), (_, b) in zip(one_each, two_each, strict=True):
        assert np.all(np.abs(a - b) <= 1.0)


@settings(max_examples=40, deadline=None)
@given(
    start=st.lists(load, min_size=1, max_size=4),
    gaps=st.lists(st.floats(0.0, 5.0), min_size=1, max_size=30),
    prompts=st.lists(st.integers(1, 16_000), min_size=1, max_size=8),
    sooner=st.floats(0.05, 1.0),
    heavier=st.floats(1.0, 3.0),
    ttft_slo=st.floats(50.0, 3000.0),
    tpot_slo=st.floats(9.0, 60.0),
    log_sd=st.sampled_from([None, 0.2]),
)
def test_a_higher_arrival_rate_never_lowers_the_level(
    start: list[tuple[int, int, float, int]],
    gaps: list[float],
    prompts: list[int],
    sooner: float,
    heavier: float,
    ttft_slo: float,
    tpot_slo: float,
    log_sd: float | None,
) -> None:
    """The same arrivals sooner (their times scaled down) or each standing for more requests:
    never a lower level for any pod. (Not asserted for the pool's level: through the chain's
    tier filter a pod made fuller can drop out of the candidates and raise the pool's share
    meeting, as with the present level; docs/capacity.md, "Not built yet".)"""
    meet = None if log_sd is None else _spread(_one_band(log_sd))
    pods = _loaded_pods(start)
    requests = [Representative(p, 0.0) for p in prompts]
    times = np.cumsum(gaps).tolist()

    def level(arrivals: Arrivals | None) -> Saturation:
        return saturation(pods, requests, POLICY, ttft_slo, tpot_slo, linear, meet, arrivals)

    base = level(_arrivals(times))
    faster = level(_arrivals([t * sooner for t in times]))
    denser = level(_arrivals(times, [heavier] * len(times)))
    for higher in (faster, denser):
        for b, a in zip(base.pods, higher.pods, strict=True):
            assert a.level >= b.level - 1e-12


def test_a_request_past_its_first_token_holds_the_pod_but_no_longer_its_prompt_in_prefill() -> None:
    def endless_decode(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
        ttft, tpot = linear(rows)
        return ttft, np.full_like(tpot, np.inf)

    # 5 s apart: each request is past its first token (about 0.12 s) before the next comes,
    # and never done decoding.
    states = project(IDLE, ONE, _arrivals([0.0, 5.0, 10.0, 15.0]), endless_decode)
    held = [list(h) for _, h in states]
    assert held == [pytest.approx([k / 2] * 2, abs=1e-3) for k in range(4)]
    assert all(s[0].prefill_tokens_in_flight == 0 for s, _ in states)


def test_the_replay_grid_below_the_present_load_holds_that_much_prefill_work() -> None:
    """The latency grid's states below a pod's present load are that pod with fewer of its
    requests: their prefill tokens in flight go with them, so the empty state holds none (an
    empty pod with its present prefill work would read slow, and the grid's non-decreasing
    envelope would carry that up to the present load)."""
    seen: list[Candidate] = []

    def recording(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
        seen.extend(rows)
        return np.full(len(rows), 100.0), np.full(len(rows), 10.0)

    busy = pod(
        "p0",
        num_request_running=4,
        num_request_waiting=4,
        prefill_tokens_in_flight=8000,
        ms_since_last_token=30.0,
        oldest_prefill_wait_ms=900.0,
    )
    arrivals = Arrivals((1.0, 2.0), 60.0, 50.0)
    assert project([busy], [Representative(1000, 0.0)], arrivals, recording)
    by_load: dict[int, Candidate] = {}
    for r in seen:  # the grid is predicted first (later calls are the chain's, on the states)
        by_load.setdefault(r.num_request_running + r.num_request_waiting, r)
    assert by_load[0].prefill_tokens_in_flight == 0
    assert by_load[4].prefill_tokens_in_flight == 4000  # half the requests, half the work
    assert by_load[8].prefill_tokens_in_flight == 8000  # the present state as it stands
    # The progress goes with the requests: the empty state has none (a 900 ms prefill wait on
    # an empty pod reads as a jammed one), the others keep the oldest present one's.
    assert (by_load[0].ms_since_last_token, by_load[0].oldest_prefill_wait_ms) == (0.0, 0.0)
    assert by_load[4].oldest_prefill_wait_ms == by_load[8].oldest_prefill_wait_ms == 900.0


def test_a_pod_scaled_to_no_load_carries_no_progress_and_one_scaled_up_keeps_it() -> None:
    busy = pod(
        "p0",
        num_request_running=3,
        num_request_waiting=1,
        kv_cache_percentage=0.6,
        prefill_tokens_in_flight=3000,
        ms_since_last_token=12.0,
        oldest_prefill_wait_ms=400.0,
        ms_since_last_first_token=150.0,
    )
    idle = scaled(busy, 0.0)
    assert (idle.num_request_running, idle.prefill_tokens_in_flight) == (0, 0)
    assert (idle.ms_since_last_token, idle.oldest_prefill_wait_ms) == (0.0, 0.0)
    assert idle.ms_since_last_first_token == 0.0
    fuller = scaled(busy, 2.0)  # the same work over half the pods
    assert (fuller.num_request_running, fuller.num_request_waiting) == (6, 2)
    assert fuller.kv_cache_percentage == 1.0  # a pod holds at most all its KV
    assert (fuller.ms_since_last_token, fuller.oldest_prefill_wait_ms) == (12.0, 400.0)


# The saturation level as a pod count (the simulated scaler's and the service's gauge).


def _levels(table: dict[float, float | None]) -> Callable[[float], float | None]:
    def level_at(factor: float) -> float | None:
        return table[factor]

    return level_at


def test_over_the_budget_the_count_adds_the_share_of_pods_missing_because_of_load() -> None:
    # 10 % of requests miss on idle pods whatever the count: only the 30 % more counts.
    level = _levels({1.0: 0.40, 0.0: 0.10})
    assert saturation_replicas(level, pods=4, current=4, budget=0.05) == 4 + 2  # ceil(4 x 0.3)
    # At least one pod, however small the excess.
    assert saturation_replicas(_levels({1.0: 0.07, 0.0: 0.0}), 4, 4, 0.05) == 5
    # Added to the count the caller scales (the simulated scaler's ready + starting pods).
    assert saturation_replicas(level, pods=4, current=6, budget=0.05) == 8


def test_within_the_budget_one_pod_fewer_when_the_same_work_on_it_stays_within() -> None:
    fits = _levels({1.0: 0.02, 0.0: 0.0, 4 / 3: 0.04})
    assert saturation_replicas(fits, pods=4, current=4, budget=0.05) == 3
    tight = _levels({1.0: 0.02, 0.0: 0.0, 4 / 3: 0.09})
    assert saturation_replicas(tight, pods=4, current=4, budget=0.05) == 4
    # A single pod is never asked to go: there is no "one fewer" to price.
    assert saturation_replicas(_levels({1.0: 0.0, 0.0: 0.0}), 1, 1, 0.05) == 1


def test_without_a_level_there_is_no_count() -> None:
    assert saturation_replicas(_levels({1.0: None, 0.0: 0.0}), 3, 3, 0.05) is None
    assert saturation_replicas(_levels({1.0: 0.5, 0.0: None}), 3, 3, 0.05) is None


@settings(max_examples=40, deadline=None)
@given(
    start=st.lists(load, min_size=2, max_size=5),
    more=st.lists(load, min_size=5, max_size=5),
    prompts=st.lists(st.integers(1, 16_000), min_size=1, max_size=8),
    ttft_slo=st.floats(50.0, 3000.0),
    tpot_slo=st.floats(9.0, 60.0),
)
def test_the_count_never_falls_as_pods_fill(
    start: list[tuple[int, int, float, int]],
    more: list[tuple[int, int, float, int]],
    prompts: list[int],
    ttft_slo: float,
    tpot_slo: float,
) -> None:
    """On the models' chain (the 0/1 rule, where the pool's level is monotone): adding load to
    any pod never lowers the pods asked for. The idle level is the same for both (the pods
    scaled to no load), so a fuller pool is over the budget whenever an emptier one is, by
    more, and prices one pod fewer higher."""
    pods = _loaded_pods(start)
    fuller = _filled(pods, more)
    requests = [Representative(p, 0.0) for p in prompts]

    def count(state: list[Candidate]) -> int | None:
        def level_at(factor: float) -> float:
            rows = [scaled(p, factor) for p in state]
            return saturation(rows, requests, POLICY, ttft_slo, tpot_slo, linear).level

        return saturation_replicas(level_at, len(state), len(state), 0.05)

    before, after = count(pods), count(fuller)
    assert before is not None and after is not None
    assert len(pods) - 1 <= before <= after


def test_a_pod_under_its_service_rate_drains_to_its_load_not_a_queue() -> None:
    """A request already on a pod holding N shares it with N - 1 others: the replay drains it
    at the latency the grid gives one that joins N - 1 others. Read at N, a processor-sharing
    pod (a request joining N others decodes for (N + 1) x 0.1 s) drained at N / (N + 1) of
    its rate, and a pod loaded to 90 % of it found 7 to 11 requests, not under 1 (the
    replay's states were about twice too full at 1.0-1.2x saturation, docs/capacity.md)."""

    def sharing(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
        held = np.array([r.num_request_running + r.num_request_waiting for r in rows], float)
        return np.full(len(rows), 1.0), 10.0 * (1.0 + held)  # x 10 further tokens: (N + 1) x 0.1 s

    # 18 a second for 50 s over 2 pods: 9 a second each, 90 % of the 10 a pod serves.
    steady = _arrivals([k / 18.0 for k in range(900)])
    held = [list(h) for _, h in project(IDLE, ONE, steady, sharing)]
    assert all(0.2 < n < 1.5 for h in held for n in h)


def test_a_decoding_request_drains_at_the_latency_of_a_pod_without_its_prompt_in_prefill() -> None:
    """Requests past their first token no longer hold their prompt in prefill, which is what
    slows the decode here: the replay reads their drain off the table in which none of the
    requests above the present load is before its first token. Read off the table in which all
    are (one table, as before), each decode took three times as long: the pods held 1.6 to 15.6
    requests, growing, where they hold about one."""

    def prefill_slows_decode(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
        prefill = np.array([r.prefill_tokens_in_flight for r in rows], float)
        # 100 ms a token, x 3 with one 2,000-token prompt in prefill; x 10 further tokens.
        return np.full(len(rows), 1.0), 100.0 * (1.0 + prefill / 1000.0)

    # One arrival a second on each of 2 pods, each decoding for 1 s.
    steady = _arrivals([k / 2.0 for k in range(80)])
    held = [list(h) for _, h in project(IDLE, ONE, steady, prefill_slows_decode)]
    assert all(n < 2.0 for h in held for n in h)


def _sharing_twice(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
    """Models that read each decode at twice what a processor-sharing pod takes: a request
    joining N others decodes for (N + 1) x 0.2 s over 10 further tokens."""
    held = np.array([r.num_request_running + r.num_request_waiting for r in rows], float)
    return np.full(len(rows), 1.0), 20.0 * (1.0 + held)


def _served_sharing(counts: Sequence[int], each: int = 30) -> Served:
    """What such a pod really measured: 1 ms to the first token, (N + 1) x 10 ms a token."""
    return Served(
        tuple((float(n), 0.001) for n in counts for _ in range(each)),
        tuple((float(n), 0.01 * (n + 1)) for n in counts for _ in range(each)),
    )


def test_the_replay_drains_at_the_latency_the_pool_measured_not_the_models_reading() -> None:
    """The models read the decode at twice what the pool measured: 9 arrivals a second on each
    pod are 180 % of what they say a pod serves, and the replay's queue grows; scaled to what
    the pool's recent requests measured by the requests on their pod (90 % of its rate), the
    pods hold about one, as they do."""
    steady = [k / 18.0 for k in range(900)]  # 18 a second over 2 pods for 50 s
    as_read = [list(h) for _, h in project(IDLE, ONE, _arrivals(steady), _sharing_twice)]
    assert max(n for h in as_read for n in h) > 5.0
    measured = Arrivals(tuple(steady), 60.0, 11.0, served=_served_sharing(range(13)))
    held = [list(h) for _, h in project(IDLE, ONE, measured, _sharing_twice)]
    assert all(0.2 < n < 1.5 for h in held for n in h)


def test_a_count_measured_too_rarely_takes_the_ratio_of_the_nearest_lower_one() -> None:
    """Measured only with no request ahead (and 5 samples at three, too few to count), the
    decode's ratio of one half holds at every count: the same states as measured at all."""
    steady = _arrivals([k / 18.0 for k in range(900)])
    everywhere = dataclasses.replace(steady, served=_served_sharing(range(13)))
    sparse = Served(
        _served_sharing([0]).ttft + _served_sharing([3], each=5).ttft,
        _served_sharing([0]).tpot + tuple((3.0, 1.0) for _ in range(5)),  # 25x slower: ignored
    )
    at_zero = dataclasses.replace(steady, served=sparse)
    a = [h for _, h in project(IDLE, ONE, everywhere, _sharing_twice)]
    b = [h for _, h in project(IDLE, ONE, at_zero, _sharing_twice)]
    assert np.allclose(a, b)


def test_a_pd_pool_and_a_pool_with_no_samples_keep_the_models_tables() -> None:
    steady = _arrivals([k / 18.0 for k in range(900)])
    nothing = dataclasses.replace(steady, served=Served())
    assert np.allclose(
        [h for _, h in project(IDLE, ONE, steady, _sharing_twice)],
        [h for _, h in project(IDLE, ONE, nothing, _sharing_twice)],
    )
    pd = [dataclasses.replace(IDLE[0], role="prefill"), dataclasses.replace(IDLE[1], role="decode")]
    measured = dataclasses.replace(steady, served=_served_sharing(range(13)))
    assert np.allclose(
        [h for _, h in project(pd, ONE, steady, _sharing_twice)],
        [h for _, h in project(pd, ONE, measured, _sharing_twice)],
    )


def test_a_pd_pools_count_per_role_is_asked_by_the_misses_its_own_pods_cause() -> None:
    """Each role's count reads the level with only its pods scaled: 30 points of misses go
    with the prefill pods' load, 2 with the decode pods'; 10 miss on any pods."""

    def level_at(factor: float, role: str) -> float:
        return (
            0.10
            + 0.30 * (factor if role == "prefill" else 1.0)
            + 0.02 * (factor if role == "decode" else 1.0)
        )

    roles = ["prefill"] * 4 + ["decode"] * 4
    # Prefill: 4 + ceil(4 x 0.30); decode: within the budget on three pods (0.027 <= 0.05).
    assert role_replicas(level_at, roles, 0.05) == {"prefill": 6, "decode": 3}
    assert role_replicas(level_at, ["", "", ""], 0.05) is None  # one role: no split
    assert role_replicas(level_at, ["prefill", "prefill"], 0.05) is None
    assert role_replicas(lambda f, r: None, roles, 0.05) is None


def test_loaded_prefill_pods_ask_for_prefill_pods_not_decode_ones() -> None:
    """Through the chain's own placement on a P/D pool: prefill pods with deep queues make the
    TTFT miss, idle decode pods meet the TPOT; the level with the prefill pods idle falls, with
    the decode pods idle it does not, so only the prefill count rises."""
    busy = {"num_request_waiting": 30, "num_request_running": 8, "kv_cache_percentage": 0.9}
    pods = [pod(f"p{i}", role="prefill", **busy) for i in range(2)] + [
        pod(f"d{i}", role="decode", num_request_running=1, num_request_waiting=0) for i in range(2)
    ]

    # The level reads each request's TTFT on the prefill pod the chain paired it with (read
    # on the decode pod, as before, it was 0 here: the prefill queues went unseen).
    sat = saturation(pods, REQUESTS, POLICY, 1000.0, 50.0, linear)
    assert sat.level == 1.0 and sat.meeting_ttft == 0.0 and sat.meeting_tpot == 1.0
    assert sat.p50.ttft_headroom_ms is not None and sat.p50.ttft_headroom_ms < 0

    def level_at(factor: float, role: str) -> float | None:
        rows = [scaled(p, factor) if p.role == role else p for p in pods]
        return saturation(rows, REQUESTS, POLICY, 1000.0, 50.0, linear).level

    counts = role_replicas(level_at, [p.role for p in pods], 0.05)
    assert counts is not None
    assert counts["prefill"] > 2 and counts["decode"] <= 2


def test_a_decode_pods_queue_delays_first_tokens_and_asks_for_decode_pods() -> None:
    """A P/D decode pod with requests waiting for a place in its batch holds every first token
    it is handed, which neither model sees (the TTFT is timed on the prefill pod, the TPOT
    starts after admission): the level reads the wait, and the decode count rises, not the
    prefill one."""
    pods = [pod(f"p{i}", role="prefill", num_request_running=1) for i in range(2)] + [
        pod(f"d{i}", role="decode", num_request_running=20, num_request_waiting=0) for i in range(2)
    ]
    calm = saturation(pods, REQUESTS, POLICY, 1000.0, 50.0, linear)
    queued = [
        dataclasses.replace(p, num_request_waiting=40) if p.role == "decode" else p for p in pods
    ]
    sat = saturation(queued, REQUESTS, POLICY, 1000.0, 50.0, linear)
    assert calm.meeting_ttft == 1.0
    # 41 admissions ahead, 20 running at 18 ms x 256 tokens: some 9 s before the first token.
    assert decode_wait_ms(queued, np.full((1, 4), 18.0), 256.0)[0, 2] == pytest.approx(
        41 * 18.0 * 256 / 20
    )
    assert decode_wait_ms(pods, np.full((1, 4), 18.0), 256.0).max() == 0.0
    assert sat.meeting_ttft == 0.0 and sat.level == 1.0
    # Short answers drain the queue as fast: the pool's own mean length, not the policy's 256.
    short = saturation(queued, REQUESTS, POLICY, 1000.0, 50.0, linear, output_tokens=2.0)
    assert short.meeting_ttft == 1.0
    assert sat.p50.ttft_headroom_ms is not None and sat.p50.ttft_headroom_ms < -5000
    # An aggregated pod's waiting requests are its own queue, which the TTFT model reads.
    both = [dataclasses.replace(p, role="") for p in queued]
    assert decode_wait_ms(both, np.full((1, 4), 18.0), 256.0).max() == 0.0

    def level_at(factor: float, role: str) -> float | None:
        rows = [scaled(p, factor) if p.role == role else p for p in queued]
        return saturation(rows, REQUESTS, POLICY, 1000.0, 50.0, linear).level

    counts = role_replicas(level_at, [p.role for p in queued], 0.05)
    assert counts is not None and counts["decode"] > 2 and counts["prefill"] <= 2
