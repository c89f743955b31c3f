"""The pod's vLLM V1 behaviour: chunk-wise KV allocation, preemption by recompute, the gauges,
prefix blocks cached per chunk, step-time noise and step-cost scales."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from backend.sim.cost import StepCost
from backend.sim.gpu import load_profile
from backend.sim.kvcache import blocks
from backend.sim.server import Done, FirstToken, Outcome, Request, Seq, Server
from tests.unit.sim.helpers import check_server

PROFILE = load_profile("a100-llama3-8b")
BUDGET = PROFILE.max_num_batched_tokens  # 2,048 tokens an iteration


def _ids(rid: int, prompt: int) -> list[int]:
    return [rid * 1000 + u for u in range(-(-prompt // 512))]


def _req(rid: int, prompt: int, output: int) -> Request:
    return Request(rid, 0.0, prompt, output, _ids(rid, prompt), 0)


def _small(capacity_tokens: int) -> Server:
    return Server(0, "p", dataclasses.replace(PROFILE, kv_capacity_tokens=capacity_tokens))


def _step(server: Server, t: float, out: list[Outcome]) -> float | None:
    out.clear()
    nxt = server.advance(t, out)
    check_server(server)
    return nxt


def test_admission_allocates_the_first_chunk_only() -> None:
    server = Server(0, "p", PROFILE)
    seq = Seq(_req(0, 10_000, 5))
    server.enqueue(seq, 0.0)
    # vLLM V1 allocates blocks for the tokens scheduled, not for the whole prompt.
    assert seq.computed == 0 and server.kv.used == blocks(BUDGET)
    assert server.metrics().kv_cache_usage == pytest.approx(blocks(BUDGET) / server.kv.capacity)
    out: list[Outcome] = []
    t = _step(server, server._ends[0], out)
    assert seq.computed == BUDGET and server.kv.used == blocks(2 * BUDGET)
    while t is not None:
        t = _step(server, t, out)
    assert seq.generated == 5


def test_a_long_prompt_is_admitted_where_its_whole_prompt_would_not_fit() -> None:
    # 400 blocks: a 10,000-token prompt needs 625, its first chunk 128 (+ 4 of watermark).
    server = _small(400 * 16)
    seq = Seq(_req(0, 10_000, 5))
    assert server.enqueue(seq, 0.0) is not None
    assert server.running == [seq] and not server.waiting


def _outgrowing(prompt_b: int) -> tuple[Server, Seq, Seq, float | None]:
    """300 blocks. Both prompts fit; their decodes outgrow the cache, so the last admitted
    request (b) is preempted, goes back to the head of the queue and recomputes later."""
    server = _small(300 * 16)
    a, b = Seq(_req(0, 2_000, 1_500)), Seq(_req(1, prompt_b, 1_500))
    t = server.enqueue(a, 0.0)
    return server, a, b, server.enqueue(b, 0.0) or t


def test_preemption_when_blocks_run_out_and_the_victim_recomputes() -> None:
    server, a, b, t = _outgrowing(2_500)
    out: list[Outcome] = []
    preempted_at: int | None = None
    done: dict[int, float] = {}
    firsts: dict[int, int] = {}
    while t is not None:
        t = _step(server, t, out)
        for o in out:
            if isinstance(o, Done):
                done[o.seq.req.rid] = o.time
            if isinstance(o, FirstToken):
                firsts[o.seq.req.rid] = firsts.get(o.seq.req.rid, 0) + 1
        if preempted_at is None and b.preemptions:
            preempted_at = b.target - b.req.prompt
            # The gauges as vLLM reports them: the preempted request counts as waiting.
            m = server.metrics()
            assert (m.num_waiting, m.num_running) == (1, 1)
            assert list(server.waiting) == [b] and server.running == [a]
            assert b.computed == 0 and b.owned == 0 and b.private == 0
    assert a.preemptions == 0 and b.preemptions >= 1 and server.preemptions == b.preemptions
    assert preempted_at is not None and preempted_at > 0
    # Recompute: the resumed prefill covered the prompt and every token generated before.
    assert b.target >= b.req.prompt + preempted_at
    assert a.generated == b.generated == 1_500
    assert firsts == {0: 1, 1: 1}  # a first token is reported once, preemption or not
    assert done[0] < done[1]
    assert server.kv.used == 0


def test_a_resumed_request_reuses_its_own_cached_prefix() -> None:
    server, _, b, t = _outgrowing(2_560)
    out: list[Outcome] = []
    resumed_from = None
    while t is not None:
        t = _step(server, t, out)
        if b.preemptions and resumed_from is None and b in server.running:
            resumed_from = b.computed
    # b's prompt units were cached as its chunks completed; the preemption left them cached but
    # evictable, deepest first. a's growth evicted the deepest; the rest is a hit for the resume.
    assert b.hit_tokens == 0  # its first admission had no hit
    assert resumed_from is not None and 0 < resumed_from < b.req.prompt
    assert resumed_from % 512 == 0


def test_prefix_units_are_cached_as_their_chunks_complete() -> None:
    server = Server(0, "p", PROFILE)
    seq = Seq(_req(0, 5_000, 3))
    units = seq.req.units
    t = server.enqueue(seq, 0.0)
    assert server.prefix_hit_units(units) == 0
    out: list[Outcome] = []
    assert t is not None
    t = _step(server, t, out)
    # 2,048 tokens computed: the first four 512-token units can be hit while the prefill goes on.
    assert not seq.prefilled and server.prefix_hit_units(units) == 4
    # A request sharing them, arriving now, reuses them once the budget lets it in.
    other = Seq(Request(1, t or 0.0, 3_000, 3, [*units[:4], 99_001, 99_002], 0))
    t = server.enqueue(other, t or 0.0) or t
    while other.hit_tokens < 0 and t is not None:
        t = _step(server, t, out)
    assert not seq.prefilled and other.hit_tokens == 4 * 512
    while t is not None:
        t = _step(server, t, out)
    assert server.prefix_hit_units(units) == len(units)


def _run_times(server: Server) -> list[float]:
    t = server.enqueue(Seq(_req(0, 3_000, 200)), 0.0)
    t = server.enqueue(Seq(_req(1, 1_000, 150)), 0.0) or t
    times: list[float] = []
    out: list[Outcome] = []
    while t is not None:
        times.append(t)
        t = server.advance(t, out)
    return times


def test_step_noise_is_seeded_and_reproducible() -> None:
    quiet = _run_times(Server(0, "p", PROFILE))
    a = _run_times(Server(0, "p", PROFILE, step_noise=0.05, seed=1))
    b = _run_times(Server(0, "p", PROFILE, step_noise=0.05, seed=1))
    c = _run_times(Server(0, "p", PROFILE, step_noise=0.05, seed=2))
    assert a == b
    assert a != c and a != quiet
    # The noise is multiplicative around the profile's cost: the whole run stays close.
    assert a[-1] == pytest.approx(quiet[-1], rel=0.05)


def test_step_noise_has_the_configured_spread() -> None:
    cost = StepCost(PROFILE, 8_192).decode_run(8, 8 * 1_000, 1)[0]
    server = Server(0, "p", PROFILE, step_noise=0.1, seed=0)
    ratios = np.log([server._noisy(cost) / cost for _ in range(4_000)])
    assert abs(ratios.mean()) < 0.01
    assert ratios.std() == pytest.approx(0.1, rel=0.05)


def test_a_clone_runs_noise_free() -> None:
    server = Server(0, "p", PROFILE, step_noise=0.2, seed=0)
    server.enqueue(Seq(_req(0, 3_000, 50)), 0.0)
    probe = Seq(_req(1, 1_000, 20))
    quiet = Server(0, "q", PROFILE)
    quiet.enqueue(Seq(_req(0, 3_000, 50)), 0.0)
    # Same plan, but the noisy pod's first iteration has its own drawn length; the copy
    # continues from it without noise, exactly as the quiet pod does from its own.
    ttft, tpot = server.clone().lookahead(probe, 0.0)
    again = server.clone().lookahead(probe, 0.0)
    assert (ttft, tpot) == again and math.isfinite(ttft)
    assert ttft == pytest.approx(quiet.lookahead(Seq(_req(1, 1_000, 20)), 0.0)[0], rel=0.25)


def test_step_cost_scales_apply_to_their_own_share() -> None:
    base = StepCost(PROFILE, 8_192)
    slow_decode = StepCost(PROFILE, 8_192, decode_scale=1.3)
    slow_prefill = StepCost(PROFILE, 8_192, prefill_scale=0.7)
    decode = base.step([], 16, 16 * 2_000)
    prefill = base.step([(1_024, 0)], 0, 0)
    assert slow_decode.step([], 16, 16 * 2_000) == pytest.approx(1.3 * decode)
    assert slow_decode.step([(1_024, 0)], 0, 0) == pytest.approx(prefill)
    assert slow_prefill.step([(1_024, 0)], 0, 0) == pytest.approx(0.7 * prefill)
    assert slow_prefill.step([], 16, 16 * 2_000) == pytest.approx(decode)
    np.testing.assert_allclose(
        slow_decode.decode_run(16, 16 * 2_000, 4), 1.3 * base.decode_run(16, 16 * 2_000, 4)
    )
    # A mixed iteration lies between: each share scaled by its own factor.
    mixed = base.step([(1_024, 0)], 16, 16 * 2_000)
    assert mixed < slow_decode.step([(1_024, 0)], 16, 16 * 2_000) < 1.3 * mixed
    with pytest.raises(ValueError, match="scales"):
        StepCost(PROFILE, 8_192, decode_scale=0.0)
