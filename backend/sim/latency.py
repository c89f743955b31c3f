"""Noise-free TTFT/TPOT of a vLLM-like pod from the upstream wire features, and a row sampler.

The pod runs continuous batching with chunked prefill, as vLLM does by default: every iteration
first schedules one decode token for each running request, then fills the rest of the token
budget (``max_num_batched_tokens``) with prefill work in arrival order. Iteration cost comes from
the measured :class:`~backend.sim.gpu.GpuProfile`; this module only decides which iterations a
request has to wait for.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.sim.gpu import FloatArray, GpuProfile, profiles_dir

IntArray = npt.NDArray[np.int64]
Array = npt.NDArray[Any]

# Share of sampled rows with an empty pod, and with a prefix score drawn uniformly rather than
# from the traces: both make sure the sampler covers regimes that real traffic visits rarely.
IDLE_SHARE = 0.15
UNIFORM_PREFIX_SHARE = 0.2
# vLLM stops admitting before the KV cache is completely full (it keeps a small watermark).
KV_ADMIT_LIMIT = 0.98
# Sampled concurrency reaches this multiple of what the pod can run (by KV or by slots), so that
# a share of rows is saturated, with requests waiting for KV or a slot.
OVERLOAD = 1.5


@dataclass(frozen=True, eq=False)
class Workload:
    """Empirical quantile tables of real traces (``profiles/workload.json``)."""

    prompt_q: FloatArray
    prompt_tokens: FloatArray
    output_q: FloatArray
    output_tokens: FloatArray
    prefix_q: FloatArray
    prefix_ratio: FloatArray
    output_mean: float
    output_mean_residual: float

    def prompt(self, u: FloatArray) -> FloatArray:
        return np.asarray(
            np.exp(np.interp(u, self.prompt_q, np.log(self.prompt_tokens))), dtype=np.float64
        )

    def output(self, u: FloatArray) -> FloatArray:
        return np.asarray(
            np.exp(np.interp(u, self.output_q, np.log(self.output_tokens))), dtype=np.float64
        )

    def prefix(self, u: FloatArray) -> FloatArray:
        return np.asarray(np.interp(u, self.prefix_q, self.prefix_ratio), dtype=np.float64)

    def context_moments(self) -> tuple[float, float]:
        """Mean and variance of a running request's context (prompt + tokens generated so far)."""
        u = (np.arange(20_000) + 0.5) / 20_000
        p, o = self.prompt(u), self.output(u)
        # Generated-so-far is output x U(0, 1): E = E[o]/2, E[(oU)^2] = E[o^2]/3.
        mean = float(p.mean() + o.mean() / 2)
        var = float(p.var() + (o**2).mean() / 3 - (o.mean() / 2) ** 2)
        return mean, var


@cache
def load_workload() -> Workload:
    data = json.loads((profiles_dir() / "workload.json").read_text(encoding="utf-8"))

    def arr(section: str, key: str) -> FloatArray:
        return np.asarray(data[section][key], dtype=np.float64)

    return Workload(
        prompt_q=arr("prompt_tokens", "q"),
        prompt_tokens=np.maximum(arr("prompt_tokens", "tokens"), 1.0),
        output_q=arr("output_tokens", "q"),
        output_tokens=np.maximum(arr("output_tokens", "tokens"), 1.0),
        prefix_q=arr("prefix_hit", "q"),
        prefix_ratio=arr("prefix_hit", "ratio"),
        output_mean=float(data["output_tokens"]["mean"]),
        output_mean_residual=float(data["output_tokens"]["mean_residual"]),
    )


def _col(cols: dict[str, Array], key: str, lo: float = 0.0) -> FloatArray:
    if key not in cols:
        raise KeyError(f"missing wire field {key!r}")
    return np.maximum(np.asarray(cols[key], dtype=np.float64), lo)


def _drain(
    p: GpuProfile, tokens: FloatArray, decode_batch: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Linear-layer time and iteration count to prefill ``tokens`` beside a decode batch.

    Each iteration carries the decode batch plus as many prefill tokens as the budget leaves, so
    all but the last iteration are full; the linear layers see both kinds of rows.
    """
    budget = np.maximum(p.max_num_batched_tokens - decode_batch, 1.0)
    steps = np.maximum(np.ceil(tokens / budget), 1.0)
    last = tokens - (steps - 1) * budget
    linear = (steps - 1) * p.linear_ms(budget + decode_batch) + p.linear_ms(last + decode_batch)
    return linear, steps


def _queued_attention(p: GpuProfile, queued: FloatArray, waiting: FloatArray) -> FloatArray:
    """Prefill attention of the work queued ahead, split evenly over the waiting requests."""
    seqs = np.where(queued > 0, np.maximum(waiting, 1.0), 0.0)
    return seqs * p.prefill_attention_ms(queued / np.maximum(seqs, 1.0), 0.0)


def true_latency(cols: dict[str, Array], profile: GpuProfile) -> tuple[FloatArray, FloatArray]:
    """Noise-free ``(ttft_ms, tpot_ms)`` for rows of upstream wire features.

    TTFT is the later of (a) the prefill drain and (b) the admission wait plus the own prefill:

    * Drain, linear layers: the queued uncached tokens (``prefill_tokens_in_flight``), then the
      request's own uncached ``input * (1 - prefix)`` tokens, go through in chunks of the token
      budget that the decode batch leaves free, because the queue is first come first served.
    * Drain, interleaved decode: every drain iteration also runs the running batch's decode
      (attention over the KV implied by ``kv_cache_percentage``, LM head, framework overhead),
      which is how a busy pod slows prefill under continuous batching.
    * Drain, attention: the own new tokens also attend over the cached prefix, so a prefix hit
      saves linear work but not all attention; queued attention is split over
      ``num_request_waiting`` sequences because attention is superlinear in sequence length.
    * Admission: with no free slot (``max_num_seqs``) or no KV room for the queue and the prompt,
      nothing new starts until running requests finish and free them, at ``running / mean
      residual output`` requests per decode step; the queue drains meanwhile, hence the maximum.

    TPOT is one decode step of the running batch plus this request (``running + 1``) at a mean KV
    length of ``(kv_cache_percentage * capacity + input + generated) / batch``, plus prefill
    interference: the queued prefill rides along in the next decode iterations as chunks, and
    its extra cost is spread over the request's decode (the traces' mean output length, or longer
    when the queue outlasts it). ``decode_tokens_in_flight`` adds nothing beyond the KV usage in
    this model and is ignored.
    """
    kv = np.minimum(_col(cols, "kv_cache_percentage"), 1.0)
    inp = _col(cols, "input_token_length", 1.0)
    waiting = _col(cols, "num_request_waiting")
    running = _col(cols, "num_request_running")
    prefix = np.minimum(_col(cols, "prefix_cache_score"), 1.0)
    queued = _col(cols, "prefill_tokens_in_flight")
    generated = _col(cols, "num_tokens_generated")
    w = load_workload()
    cap = float(profile.kv_capacity_tokens)

    used = kv * cap
    run_kv = used / np.maximum(running, 1.0)
    # A full prefix hit still recomputes the last token: vLLM needs its logits.
    own = np.maximum(inp * (1.0 - prefix), 1.0)
    cached = inp - own

    slot_deficit = np.maximum(running + waiting + 1.0 - profile.max_num_seqs, 0.0)
    kv_deficit = np.maximum(used + queued + own - KV_ADMIT_LIMIT * cap, 0.0)
    residual = w.output_mean_residual
    wait_steps = np.where(
        running > 0,
        np.maximum(
            slot_deficit * residual / np.maximum(running, 1.0),
            kv_deficit * residual / np.maximum(used, 1.0),
        ),
        0.0,
    )
    admission = wait_steps * profile.decode_step_ms(running, run_kv)

    per_step = (
        profile.decode_attention_ms(running, run_kv)
        + profile.lm_head_ms(running + 1.0)
        + profile.step_overhead_ms(running + 1.0)
    )
    own_attn = profile.prefill_attention_ms(own, cached)
    queued_attn = _queued_attention(profile, queued, waiting)
    linear, steps = _drain(profile, queued + own, running)
    drain = linear + steps * per_step + own_attn + queued_attn
    own_linear, own_steps = _drain(profile, own, running)
    # Queued requests are admitted as slots and KV free up, so the queue drains during the wait;
    # the request is done when both its own prefill after the wait and the whole drain are.
    ttft = np.maximum(admission + own_linear + own_steps * per_step + own_attn, drain)

    batch = running + 1.0
    decode = profile.decode_step_ms(batch, (used + inp + generated) / batch)
    mixed_linear, mixed_steps = _drain(profile, queued, batch)
    extra = np.where(
        queued > 0, mixed_linear - mixed_steps * profile.linear_ms(batch) + queued_attn, 0.0
    )
    tpot = decode + extra / np.maximum(w.output_mean, mixed_steps)
    return ttft, tpot


def _prompt_lengths(
    rng: np.random.Generator, n: int, w: Workload, lo: int, hi: int | None
) -> IntArray:
    """Prompt lengths from the traces' distribution truncated to ``[lo, hi]``."""
    log_tokens = np.log(w.prompt_tokens)
    u_lo = float(np.interp(np.log(lo), log_tokens, w.prompt_q))
    u_hi = 1.0 if hi is None else float(np.interp(np.log(hi + 1.0), log_tokens, w.prompt_q))
    if u_hi - u_lo < 1e-3:
        # Beyond what the traces cover: spread log-uniformly so that long prompts still appear.
        upper = float(hi) if hi is not None else 2.0 * lo
        x = np.exp(rng.uniform(np.log(lo), np.log(upper + 1.0), n))
    else:
        x = w.prompt(rng.uniform(u_lo, u_hi, n))
    upper_bound = hi if hi is not None else np.iinfo(np.int64).max
    return np.clip(np.floor(x), lo, upper_bound).astype(np.int64)


def sample_rows(
    n: int,
    rng: np.random.Generator,
    profile: GpuProfile,
    *,
    max_input_tokens: int | None = None,
    min_input_tokens: int = 1,
    noise: float = 0.03,
) -> dict[str, Array]:
    """``n`` realistic feature rows with their true and noisy TTFT/TPOT labels.

    Prompt lengths and output lengths follow the Azure 2023 traces, prefix scores the Mooncake
    traces (plus a uniform share). Load spans an idle pod to a saturated one: a target number of
    concurrent requests is drawn log-uniformly up to 1.5 times what the pod can run; those that do
    not fit the KV cache or the ``max_num_seqs`` slots wait, so KV usage, running and waiting
    counts stay consistent. Labels carry multiplicative log-normal noise with log-sd ``noise``.
    """
    if min_input_tokens < 1 or (
        max_input_tokens is not None and max_input_tokens < min_input_tokens
    ):
        raise ValueError("need 1 <= min_input_tokens <= max_input_tokens")
    w = load_workload()
    cap = float(profile.kv_capacity_tokens)
    inp = _prompt_lengths(rng, n, w, min_input_tokens, max_input_tokens)
    prefix = np.where(rng.random(n) < UNIFORM_PREFIX_SHARE, rng.random(n), w.prefix(rng.random(n)))

    idle = rng.random(n) < IDLE_SHARE
    mean, var = w.context_moments()
    slots = float(profile.max_num_seqs)
    can_run = min(slots, KV_ADMIT_LIMIT * cap / mean)
    target = np.floor(np.exp(rng.uniform(0.0, np.log(OVERLOAD * can_run + 1.0), n)))
    # The sum of `target` independent contexts, as a Gamma with the same mean and variance (exact
    # draws would cost up to max_num_seqs draws a row).
    per_request = rng.gamma(target * mean**2 / var, var / mean) / target
    fits = np.floor(KV_ADMIT_LIMIT * cap / per_request)
    running = np.where(idle, 0.0, np.minimum(np.minimum(target, fits), slots))
    kv = running * per_request / cap

    # Requests that did not fit wait; a few more arrived since the last iteration.
    burst = np.where(rng.random(n) < 0.3, rng.geometric(0.5, n), 0)
    waiting = np.where(idle, 0, (target - running) + burst).astype(np.int64)
    owner = np.repeat(np.arange(n), waiting)
    uncached = w.prompt(rng.random(owner.size)) * (1.0 - w.prefix(rng.random(owner.size)))
    # bincount returns ints when there is nothing to count; the sum is a float.
    queued = np.bincount(owner, weights=uncached, minlength=n).astype(np.float64)
    # A long prompt may be part-way through its chunked prefill.
    partial = (running > 0) & (rng.random(n) < 0.25)
    queued += np.where(partial, rng.random(n) * w.prompt(rng.random(n)), 0.0)

    rows: dict[str, Array] = {
        "kv_cache_percentage": kv,
        "input_token_length": inp,
        "num_request_waiting": waiting,
        "num_request_running": running.astype(np.int64),
        "prefix_cache_score": prefix,
        "prefill_tokens_in_flight": np.round(queued).astype(np.int64),
        "decode_tokens_in_flight": np.round(kv * cap).astype(np.int64),
        "num_tokens_generated": (1 + np.floor(rng.random(n) * w.output(rng.random(n)))).astype(
            np.int64
        ),
    }
    ttft, tpot = true_latency(rows, profile)
    rows["ttft_true_ms"] = ttft
    rows["tpot_true_ms"] = tpot
    rows["actual_ttft_ms"] = ttft * np.exp(noise * rng.standard_normal(n))
    rows["actual_tpot_ms"] = tpot * np.exp(noise * rng.standard_normal(n))
    return rows
