"""Scalar step costs for the event loop, tabulated from a measured :class:`GpuProfile`.

The profile's methods are vectorised numpy code, about 30 us per scalar call; a simulated hour
runs some 10^5 iterations per pod, each needing several of them. ``StepCost`` evaluates the
same functions once on dense grids and answers from Python lists. The grids are exact at integer
token counts for the linear layers and the LM head (the only arguments the simulator passes);
prefill attention is interpolated linearly between 16-token knots (relative error below 1e-3
past 64 tokens, exact below 16); decode attention is memoised at 32-token resolution of the
mean KV length (one memo per profile, shared by every pod of every simulation); a decode run's
attention comes from ``GpuProfile.decode_attention_run``, the profile's grid without its
per-call set-up. ``tests/unit/sim/test_cost.py`` checks the tables against the profile.

``decode_scale`` and ``prefill_scale`` multiply the decode and the prefill share of every
iteration (for a sensitivity check of the cost model; 1.0 is the measured profile). In a mixed
iteration the linear layers, which see both kinds of tokens as one matrix, are split by token
count; decode attention, the LM head and the framework overhead count as decode (a prefill-only
iteration's LM head and overhead count as prefill).
"""

from __future__ import annotations

import weakref

import numpy as np

from backend.sim.gpu import FloatArray, GpuProfile

_KNOT = 16
_KV_RES_SHIFT = 5  # decode attention memoised per 32 tokens of mean KV length
_DECODE_MEMO_MAX = 200_000

_decode_memos: weakref.WeakKeyDictionary[GpuProfile, dict[tuple[int, int], float]] = (
    weakref.WeakKeyDictionary()
)
"""Per profile, decode attention by (batch, mean KV bucket): shared by every ``StepCost`` of the
profile (the values do not depend on the scales), so a calibration's dozens of simulations and
each one's pods fill it once instead of each pod again."""


class StepCost:
    """Cost in milliseconds of one continuous-batching iteration on one pod."""

    def __init__(
        self,
        profile: GpuProfile,
        max_context: int,
        decode_scale: float = 1.0,
        prefill_scale: float = 1.0,
    ) -> None:
        if not (decode_scale > 0 and prefill_scale > 0):
            raise ValueError("step-cost scales must be > 0")
        self.profile = profile
        self.decode_scale = decode_scale
        self.prefill_scale = prefill_scale
        self._scaled = decode_scale != 1.0 or prefill_scale != 1.0
        rows = profile.max_num_batched_tokens + profile.max_num_seqs + 1
        self._linear: list[float] = profile.linear_ms(np.arange(rows)).tolist()
        self._lm_head: list[float] = profile.lm_head_ms(
            np.arange(profile.max_num_seqs + 2)
        ).tolist()
        self._overhead = profile.overhead_ms
        self._overhead_per_seq = profile.overhead_per_seq_ms
        top = max_context + profile.max_num_batched_tokens + 2 * _KNOT
        knots = np.arange(0, top + _KNOT, _KNOT, dtype=np.float64)
        small = np.arange(_KNOT + 1, dtype=np.float64)
        # A(x): causal attention FLOP-cost of an x-token prompt; D(x): one decode read of x keys.
        self._attn: list[float] = np.where(
            knots > 0, profile.prefill_attention(knots), 0.0
        ).tolist()
        self._attn_small: list[float] = np.where(
            small > 0, profile.prefill_attention(small), 0.0
        ).tolist()
        self._read: list[float] = profile.decode_attention(1.0, np.maximum(knots, 1.0)).tolist()
        self._read_small: list[float] = profile.decode_attention(
            1.0, np.maximum(small, 1.0)
        ).tolist()
        self._decode_memo = _decode_memos.setdefault(profile, {})

    @staticmethod
    def _lookup(table: list[float], small: list[float], x: int) -> float:
        if x <= _KNOT:
            return small[x]
        i, r = divmod(x, _KNOT)
        lo = table[i]
        return lo if r == 0 else lo + (table[i + 1] - lo) * (r / _KNOT)

    def prefill_attention(self, new_tokens: int, cached_tokens: int) -> float:
        """``GpuProfile.prefill_attention_ms`` for one sequence's chunk, from the tables."""
        if new_tokens <= 0:
            return 0.0
        total = cached_tokens + new_tokens
        flops = self._lookup(self._attn, self._attn_small, total)
        if cached_tokens > 0:
            flops -= self._lookup(self._attn, self._attn_small, cached_tokens)
        fresh = self._lookup(self._attn, self._attn_small, new_tokens)
        read = self._lookup(self._read, self._read_small, total)
        return max(flops, fresh, read)

    def decode_attention(self, batch: int, mean_kv_tokens: float) -> float:
        if batch <= 0:
            return 0.0
        key = (batch, int(mean_kv_tokens) >> _KV_RES_SHIFT)
        ms = self._decode_memo.get(key)
        if ms is None:
            kv = float((key[1] << _KV_RES_SHIFT) + (1 << (_KV_RES_SHIFT - 1)))
            ms = float(self.profile.decode_attention_ms(batch, kv))
            if len(self._decode_memo) > _DECODE_MEMO_MAX:
                self._decode_memo.clear()
            self._decode_memo[key] = ms
        return ms

    def step(
        self,
        chunks: list[tuple[int, int]],
        decode_batch: int,
        decode_kv_tokens: int,
    ) -> float:
        """One iteration: prefill ``chunks`` of (new tokens, tokens already in KV) and a decode
        batch whose sequences hold ``decode_kv_tokens`` KV tokens in all.

        Linear layers see every scheduled token as one matrix; attention is per sequence kind; each
        scheduled sequence gets a row of logits and its share of the framework overhead, as in
        ``GpuProfile.iteration_ms``.
        """
        tokens = decode_batch
        attention = 0.0
        for new, cached in chunks:
            tokens += new
            attention += self.prefill_attention(new, cached)
        decode_attention = 0.0
        if decode_batch:
            decode_attention = self.decode_attention(decode_batch, decode_kv_tokens / decode_batch)
        seqs = decode_batch + len(chunks)
        rest = self._lm_head[seqs] + self._overhead + self._overhead_per_seq * seqs
        if not self._scaled:
            return self._linear[tokens] + attention + decode_attention + rest
        linear = self._linear[tokens]
        decode_share = decode_batch / tokens if tokens else 0.0
        decode = linear * decode_share + decode_attention + (rest if decode_batch else 0.0)
        prefill = linear * (1.0 - decode_share) + attention + (0.0 if decode_batch else rest)
        return self.decode_scale * decode + self.prefill_scale * prefill

    def decode_run(self, batch: int, kv_tokens: int, steps: int) -> FloatArray:
        """Costs of ``steps`` consecutive pure-decode iterations; every sequence's KV grows by one
        token an iteration, so the mean KV length rises by one each step."""
        base = self._linear[batch] + self._lm_head[batch] + self._overhead
        base += self._overhead_per_seq * batch
        mean = kv_tokens / batch + np.arange(steps, dtype=np.float64)
        costs: FloatArray = base + self.profile.decode_attention_run(batch, mean)
        if self.decode_scale != 1.0:
            costs *= self.decode_scale
        return costs
