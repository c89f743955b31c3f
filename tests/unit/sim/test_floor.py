"""The engine's options around the pod: tied arrivals spread over their tick, the predictor
call's dispatch delay, and the present-state floor of prediction error."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from backend.predictor.knowable import load_deciles
from backend.scheduling.types import TransferConfig
from backend.sim.engine import (
    PREDICTOR_CALL_MS,
    SimConfig,
    Simulation,
    predictor_call_ms,
)
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import make_policy
from backend.sim.traces import Trace, load_trace
from backend.sim.view import Slo

SLO = Slo(2000.0, 100.0)
FABRIC = TransferConfig(kv_bytes_per_token=load_profile("a100-llama3-8b").kv_bytes_per_token)


def _sim(
    trace: Trace, policy: str = "least-request", pods: int = 2, pd: str | None = None, **cfg: object
) -> Simulation:
    return Simulation(
        trace,
        build_pool(pods, "a100-llama3-8b", pd),
        make_policy(policy, FABRIC, 0),
        SimConfig(SLO, transfer=FABRIC, **cfg),  # type: ignore[arg-type]
    )


def test_spreading_ties_keeps_order_and_stays_within_the_tick() -> None:
    trace = load_trace("mooncake-conversation").head(3000)
    assert trace.tick_s == 3.0
    assert len(np.unique(trace.arrival_s)) == 330  # the recorded burstiness
    spread = trace.spread_ties(seed=7)
    a, t = spread.arrival_s, trace.arrival_s
    assert (np.diff(a) >= 0).all()  # the trace's order is kept
    assert ((a >= t) & (a < t + trace.tick_s)).all()  # each stays within its own tick
    nxt = np.append(np.unique(t)[1:], np.inf)[np.searchsorted(np.unique(t), t)]
    assert (a <= nxt).all()  # and never passes the next recorded instant
    assert len(np.unique(a)) == len(a)
    np.testing.assert_array_equal(a, trace.spread_ties(seed=7).arrival_s)
    assert not np.array_equal(a, trace.spread_ties(seed=8).arrival_s)
    # Everything else about the requests is unchanged.
    np.testing.assert_array_equal(spread.input_tokens, trace.input_tokens)
    np.testing.assert_array_equal(spread.hash_ids, trace.hash_ids)


def test_the_tick_scales_with_the_load() -> None:
    trace = load_trace("mooncake-conversation").head(500).scaled(2.0)
    assert trace.tick_s == 1.5
    a, t = trace.spread_ties(0).arrival_s, trace.arrival_s
    assert ((a >= t) & (a < t + 1.5)).all()


def _burst(n: int, at: float = 0.0, spacing: float = 0.0, output: int = 20) -> Trace:
    return Trace(
        name="burst",
        arrival_s=at + spacing * np.arange(n, dtype=np.float64),
        input_tokens=np.full(n, 1_000, dtype=np.int64),
        output_tokens=np.full(n, output, dtype=np.int64),
        hash_ids=np.arange(2 * n, dtype=np.int64),
        hash_offsets=np.arange(0, 2 * n + 1, 2, dtype=np.int64),
        prefix_source="test",
    )


def test_a_dispatch_delay_holds_requests_at_the_router() -> None:
    sim = _sim(_burst(4), dispatch_delay_ms=100.0)
    sim.run_until(0.05)
    # Decided at arrival, not yet at a pod: the router's counts and the pods have not moved.
    assert sum(sim.view.dispatched) == 0
    assert all(not s.running and not s.waiting for s in sim.servers)
    sim.run_until(0.1)
    assert sum(sim.view.dispatched) == 4
    result = sim.run()
    assert (result.ttft_ms >= 100.0).all()


def test_the_default_delay_is_the_measured_predictor_call() -> None:
    assert predictor_call_ms(make_policy("least-request", FABRIC)) == 0.0
    assert predictor_call_ms(make_policy("headroom", FABRIC)) == PREDICTOR_CALL_MS["hybrid"]
    assert predictor_call_ms(make_policy("llm-d-predicted", FABRIC)) == PREDICTOR_CALL_MS["xgboost"]
    assert _sim(_burst(1), "llm-d-predicted").dispatch_delay_s == pytest.approx(0.019)
    assert _sim(_burst(1), "llm-d-predicted", dispatch_delay_ms=0.0).dispatch_delay_s == 0.0
    with pytest.raises(ValueError, match="dispatch_delay_ms"):
        _sim(_burst(1), dispatch_delay_ms=-1.0)


def test_the_floor_is_exact_when_nothing_arrives_later_and_steps_are_noise_free() -> None:
    # One request at a time: nothing later can change its outcome, so the copy run at dispatch
    # predicts it exactly, delay included.
    sim = _sim(
        _burst(6, spacing=30.0),
        step_noise=0.0,
        floor_every=1,
        floor_warmup_s=0.0,
        dispatch_delay_ms=5.0,
    )
    r = sim.run()
    np.testing.assert_allclose(r.floor_ttft_ms, r.ttft_ms, rtol=1e-9)
    np.testing.assert_allclose(r.floor_tpot_ms, r.tpot_ms, rtol=1e-9)
    err = r.prediction_error(deciles=2)
    assert err["sampled_requests"] == 6
    assert err["ttft"]["floor"]["mape_pct"] == 0.0


def test_the_floor_misses_later_arrivals_and_noise() -> None:
    trace = load_trace("mooncake-conversation").head(400).scaled(4.0)
    r = _sim(trace, pods=2, floor_every=5, floor_warmup_s=0.0, dispatch_delay_ms=0.0).run()
    sampled = np.isfinite(r.floor_ttft_ms)
    assert sampled.sum() == 80  # every 5th of 400 dispatched requests
    err = r.prediction_error()
    # Later arrivals share the decode iterations: the present-only outcome is optimistic.
    assert err["tpot"]["floor"]["median_bias_pct"] < -5.0
    assert err["tpot"]["floor"]["mape_pct"] > 5.0
    assert (r.floor_ttft_ms[sampled] > 0).all()
    deciles = err["ttft"]["floor"]["by_load_decile"]
    assert len(deciles) == 10 and sum(d["n"] for d in deciles) == sampled.sum()
    assert [d["load_min"] for d in deciles] == sorted(d["load_min"] for d in deciles)
    # A policy without predictions has a floor but no live error.
    assert err["ttft"]["live"]["n"] == 0


def test_the_floor_samples_after_warm_up_and_skips_pd_routes() -> None:
    r = _sim(_burst(40, spacing=1.0), floor_every=2, floor_warmup_s=20.0).run()
    sampled = np.flatnonzero(np.isfinite(r.floor_ttft_ms))
    assert len(sampled) == 10 and (r.arrival[sampled] >= 20.0).all()
    pd = _sim(_burst(20, spacing=1.0), pods=2, pd="1:1", floor_every=1, floor_warmup_s=0.0).run()
    assert not np.isfinite(pd.floor_ttft_ms).any()


def test_live_error_is_measured_against_what_routing_predicted() -> None:
    trace = load_trace("azure-code").head(600).scaled(4.0)
    r = _sim(trace, "headroom", pods=4, floor_every=10, floor_warmup_s=30.0).run()
    err = r.prediction_error()
    live = err["ttft"]["live"]
    predicted = np.isfinite(r.predicted_ttft_ms) & np.isfinite(r.ttft_ms)
    assert live["n"] == predicted.sum() > 0
    rel = (r.predicted_ttft_ms[predicted] - r.ttft_ms[predicted]) / r.ttft_ms[predicted]
    assert live["mape_pct"] == pytest.approx(100 * np.abs(rel).mean(), abs=0.01)
    assert err["ttft"]["live_sampled"]["n"] <= err["sampled_requests"]


def test_deciles_sharing_a_load_sample_it_rather_than_slice_its_time() -> None:
    """60 requests at load 0 (the first 30 served by a cold model), 40 at load 1: the six
    deciles at load 0 each hold early and late ones, not the first ten, the next ten, ..."""
    load = np.array([0] * 60 + [1] * 40)
    groups = load_deciles(load, 10)
    assert [len(g) for g in groups] == [10] * 10
    assert sorted(np.concatenate(groups).tolist()) == list(range(100))
    assert all(load[a].max() <= load[b].min() for a, b in pairwise(groups))
    early = [int((g < 30).sum()) for g in groups[:6]]
    assert sum(early) == 30 and max(early) < 10  # by request order: [10, 10, 10, 0, 0, 0]
    again = load_deciles(load, 10)  # seeded: the same groups every run
    assert all((a == b).all() for a, b in zip(groups, again, strict=True))
