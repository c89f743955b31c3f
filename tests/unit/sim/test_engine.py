"""Invariants of the simulator: conservation, KV capacity, cache economics, determinism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.sim.gpu import load_profile
from backend.sim.server import Done, FirstToken, Outcome, Request, Seq, Server
from backend.sim.traces import load_trace
from tests.unit.sim.helpers import run_checked

PROFILE = load_profile("a100-llama3-8b")


@pytest.mark.parametrize(
    ("policy", "pd", "layout"),
    [
        ("round-robin", None, "rack"),
        ("llm-d-322", None, "rack"),
        ("dynamo-kv", None, "rack"),
        ("sglang-cache-aware", None, "rack"),
        ("headroom", None, "rack"),
        ("lookahead-ref", None, "rack"),
        ("llm-d-predicted", "2:2", "regions:2"),
        ("headroom", "2:2", "regions:2"),
        ("least-request", "2:2", "regions:2"),
    ],
)
def test_every_request_finishes_or_is_shed_exactly_once(
    policy: str, pd: str | None, layout: str
) -> None:
    checked = run_checked(policy, n=120, load=3.0, pd=pd, layout=layout)
    r = checked.result
    done = np.isfinite(r.done)
    assert not (done & r.shed).any()
    assert (done | r.shed).all()
    for rid in range(len(r.done)):
        assert checked.done_count[rid] == (0 if r.shed[rid] else 1)
    assert (r.first_token[done] <= r.done[done]).all()
    assert (r.first_token[done] >= r.arrival[done]).all()
    if pd is not None:
        # Every completed request crossed the fabric; its first token came after the transfer.
        assert np.isfinite(r.transfer_ms[done]).all()
        assert (r.ttft_ms[done] >= r.transfer_ms[done]).all()
        assert (r.prefill_pod[done] != r.pod[done]).all()


def test_the_router_dates_each_pods_last_first_token() -> None:
    """``ms_since_last_first_token`` is read from the time the engine records as each pod's
    last first token: the latest first token of the requests it served."""
    checked = run_checked("headroom", n=150, load=2.0)
    r, sim = checked.result, checked.sim
    assert sim is not None
    for pod in range(len(sim.servers)):
        served = (r.pod == pod) & np.isfinite(r.first_token)
        assert served.any()
        assert sim.view.first_token_at[pod] == pytest.approx(r.first_token[served].max())


def test_kv_stays_within_capacity_under_pressure() -> None:
    # Llama-2-7B holds 4x fewer tokens than Llama-3-8B; many chats decoding at once outgrow it.
    checked = run_checked(
        "round-robin", n=600, load=10.0, pods=2, gpu="a100-llama2-7b", trace="azure-conv"
    )
    assert checked.max_used_fraction > 0.9  # the run did reach a full cache...
    assert sum(p["preemptions"] for p in checked.result.pods) > 0  # ...and had to preempt
    assert np.isfinite(checked.result.done).all()


def _idle_ttft(server: Server, req: Request) -> float:
    """Run a request alone on ``server`` to its first token; seconds after its arrival."""
    out: list[Outcome] = []
    t = server.enqueue(Seq(req), req.arrival)
    while t is not None:
        out.clear()
        nxt = server.advance(t, out)
        for o in out:
            if isinstance(o, FirstToken) and o.seq.req is req:
                return o.time - req.arrival
        t = nxt
    raise AssertionError("no first token")


def _drain(server: Server, t: float | None) -> float:
    out: list[Outcome] = []
    last = 0.0
    while t is not None:
        last = t
        t = server.advance(t, out)
    return last


@settings(max_examples=25, deadline=None)
@given(prompt=st.integers(1, 20_000), shared=st.floats(0.0, 1.0))
def test_a_cache_hit_never_costs_more_prefill_than_a_miss(prompt: int, shared: float) -> None:
    units = -(-prompt // 512)
    hit_units = round(shared * units)
    ids = list(range(units))
    warm = Server(0, "warm", PROFILE)
    # A first request leaves the shared prefix cached (its other blocks differ).
    first = Request(
        0, 0.0, prompt, 2, ids[:hit_units] + [10_000 + i for i in range(units - hit_units)], 0
    )
    end = _drain(warm, warm.enqueue(Seq(first), 0.0))
    cold = Server(1, "cold", PROFILE)
    probe = Request(1, end + 1.0, prompt, 2, ids, 0)
    hit = _idle_ttft(warm, probe)
    miss = _idle_ttft(cold, Request(1, end + 1.0, prompt, 2, ids, 0))
    assert hit <= miss + 1e-12


def test_hits_match_an_unbounded_cache_when_nothing_evicts() -> None:
    trace = load_trace("mooncake-conversation").head(150).scaled(1e-4)  # one at a time
    big = dataclasses.replace(PROFILE, kv_capacity_tokens=50_000_000)
    server = Server(0, "big", big)
    seen: set[int] = set()
    expected = 0
    hits = 0
    out: list[Outcome] = []
    for i, units in enumerate(trace.all_units()):
        prompt = int(trace.input_tokens[i])
        run = 0
        for h in units:
            if h not in seen:
                break
            run += 1
        expected += min(run * 512, prompt)
        seen.update(units)
        req = Request(i, float(trace.arrival_s[i]), prompt, int(trace.output_tokens[i]), units, 0)
        t = server.enqueue(Seq(req), req.arrival)
        while t is not None:
            out.clear()
            t = server.advance(t, out)
            hits += sum(max(o.seq.hit_tokens, 0) for o in out if isinstance(o, Done))
    assert hits == expected
    assert expected > 0


def test_lookahead_leaves_the_pod_untouched() -> None:
    server = Server(0, "p", PROFILE)
    trace = load_trace("mooncake-conversation").head(20)
    t = None
    for i, units in enumerate(trace.all_units()):
        req = Request(i, 0.0, int(trace.input_tokens[i]), int(trace.output_tokens[i]), units, 0)
        t = server.enqueue(Seq(req), 0.0) or t
    before = (server.metrics(), server.kv.free, server.kv.evictable, len(server.waiting))
    probe = Request(99, 0.0, 3000, 50, [0, 1, 2, 3, 4, 5], 0)
    ttft, tpot = server.lookahead(Seq(probe), 0.0)
    assert 0 < ttft < 600 and tpot > 0
    assert (server.metrics(), server.kv.free, server.kv.evictable, len(server.waiting)) == before


def test_same_seed_same_results() -> None:
    a = run_checked("headroom", n=150, load=1.5, seed=3).result
    b = run_checked("headroom", n=150, load=1.5, seed=3).result
    for name in ("first_token", "done", "pod", "predicted_ttft_ms", "hit_tokens"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.policy["predictor"]["fits"] > 2  # the online predictor did train in the loop
    assert np.isfinite(a.predicted_ttft_ms).any()


def test_predictor_trains_from_router_samples() -> None:
    r = run_checked("llm-d-predicted", n=150, load=1.5).result
    predictor = r.policy["predictor"]
    assert predictor["kind"] == "xgboost"
    assert predictor["window_rows"]["ttft"] > 10
    # The first model comes after 10 samples; decisions before it fall back to the heuristic.
    assert 0 < r.policy["fallback_decisions"] < r.policy["decisions"]


def test_mixed_pool_trains_one_model_per_gpu_class() -> None:
    checked = run_checked(
        "headroom",
        n=300,
        load=4.0,
        pods=4,
        gpu="a100-llama2-7b:2,h100-llama2-7b:2",
        trace="azure-code",
    )
    predictor = checked.result.policy["predictor"]
    assert set(predictor["classes"]) == {"a100-llama2-7b", "h100-llama2-7b"}
    assert all(c["fits"] > 0 for c in predictor["classes"].values())
    assert np.isfinite(checked.result.predicted_ttft_ms).any()


def test_interference_router_runs_with_counterfactual_predictions() -> None:
    """The interference scorer's second predictor call (counterfactual pods) goes through the
    per-class predictors too, and the route keeps the prediction for the real candidates."""
    checked = run_checked(
        "headroom-interference",
        n=200,
        load=4.0,
        gpu="a100-llama2-7b:2,h100-llama2-7b:2",
        trace="azure-code",
    )
    r = checked.result
    assert r.policy["scheduling_policy"]["scorer"] == "interference"
    assert r.policy["fallback_decisions"] < r.policy["decisions"]
    assert np.isfinite(r.predicted_ttft_ms).any()
    again = run_checked(
        "headroom-interference",
        n=200,
        load=4.0,
        gpu="a100-llama2-7b:2,h100-llama2-7b:2",
        trace="azure-code",
    ).result
    np.testing.assert_array_equal(r.pod, again.pod)
