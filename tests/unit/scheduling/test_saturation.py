"""Saturation from predictions: levels in [0, 1], rising as pods fill, the chain's pick."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.predictor.calibration import Calibration, fit_calibration, meet_probability
from backend.scheduling.saturation import MeetProbability, Representative, saturation
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
    wider spread reaches further under the SLO. docs/capacity.md.)"""
    meet = None if log_sd is None else _spread(_one_band(log_sd))
    pods = [
        pod(
            f"p{i}",
            num_request_running=r,
            num_request_waiting=w,
            kv_cache_percentage=kv,
            prefill_tokens_in_flight=f,
        )
        for i, (r, w, kv, f) in enumerate(start)
    ]
    fuller = [
        dataclasses.replace(
            p,
            num_request_running=p.num_request_running + dr,
            num_request_waiting=p.num_request_waiting + dw,
            kv_cache_percentage=min(1.0, p.kv_cache_percentage + dkv),
            prefill_tokens_in_flight=p.prefill_tokens_in_flight + df,
        )
        for p, (dr, dw, dkv, df) in zip(pods, more, strict=False)
    ]
    requests = [Representative(p, 0.0) for p in prompts]
    policy = SchedulingPolicy(strategy=strategy)  # type: ignore[arg-type]
    before = saturation(pods, requests, policy, ttft_slo, tpot_slo, linear, meet)
    after = saturation(fuller, requests, policy, ttft_slo, tpot_slo, linear, meet)
    assert after.level >= before.level
    for b, a in zip(before.pods, after.pods, strict=True):
        assert a.level >= b.level


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
