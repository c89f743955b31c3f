"""latency-scorer: score pods by predicted headroom, or by a KV/queue/prefix heuristic without one.

Upstream's algorithm, reproduced exactly (constants, quantisation and tie rules):

* No predictions among the pods: composite fallback, normalised weights over (1 - KV),
  (maxQ - q) / maxQ and the prefix score, rounded to 1/100.
* Some pod with non-negative headroom in both dimensions: score only those (others get 0).
* All negative: idle pods (no dispatched requests) first; else deficit buckets, the first
  non-empty of TPOT-only-negative, TTFT-only-negative, both-negative; strategy forced to
  ``least`` (the smallest deficit wins, never the most overloaded pod).
* Within the scored bucket |headroom| is min-max normalised per dimension; a dimension whose
  range is zero gets weight 0 and the other weight 1. ``least``:
  score = (trunc((1 - combined) * 100) + 1) / 100, so up to 1.01; ``most``:
  score = (trunc(combined * 100) + 1) / 100.

One deviation: upstream puts a pod *without* a prediction among the positives (and, in the
deficit path, in the both-negative bucket with headroom 0), so a pod whose prediction failed
outranks every predicted one. Here such pods form a last bucket after both-negative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from backend.scheduling.state import ProfileState
from backend.scheduling.types import FloatArray, SchedulingPolicy

_W_MAX = 100
_EPS = 1e-9
IntArray = npt.NDArray[np.intp]


def normalized_weights(a: float, b: float) -> tuple[float, float]:
    total = a + b
    if total <= 0:
        return 1.0, 0.0
    return a / total, b / total


def score_bucket(
    ttft_headroom: FloatArray,
    tpot_headroom: FloatArray,
    ttft_weight: float,
    tpot_weight: float,
    least: bool,
) -> FloatArray:
    """Scores of one bucket: min-max normalised |headroom|, blended, quantised to 1/100."""
    alpha, beta = normalized_weights(ttft_weight, tpot_weight)
    h1, h2 = np.abs(ttft_headroom), np.abs(tpot_headroom)
    min1, min2 = h1.min(), h2.min()
    range1, range2 = h1.max() - min1, h2.max() - min2
    if range1 <= _EPS < range2:
        alpha, beta = 0.0, 1.0
    elif range2 <= _EPS < range1:
        alpha, beta = 1.0, 0.0
    n1 = (h1 - min1) / range1 if range1 > _EPS else np.full_like(h1, 0.5)
    n2 = (h2 - min2) / range2 if range2 > _EPS else np.full_like(h2, 0.5)
    combined = alpha * n1 + beta * n2
    # np.trunc is Go's int() conversion; the operands are >= 0 so it is also floor.
    steps = np.trunc((1.0 - combined) * _W_MAX) if least else np.trunc(combined * _W_MAX)
    result: FloatArray = (steps + 1.0) / _W_MAX
    return result


def _go_round(x: FloatArray) -> FloatArray:
    """Go's math.Round: half away from zero (numpy rounds half to even)."""
    t = np.trunc(x)
    result: FloatArray = np.where(np.abs(x - t) >= 0.5, t + np.sign(x), t)
    return result


def composite_scores(
    kv: FloatArray, waiting: FloatArray, prefix: FloatArray, policy: SchedulingPolicy
) -> FloatArray:
    """The fallback: free KV, relative queue and prefix hits, weighted, rounded to 1/100."""
    wkv, wq, wpref = (
        policy.fallback_kv_weight,
        policy.fallback_queue_weight,
        policy.fallback_prefix_weight,
    )
    total = wkv + wq + wpref
    if total <= 0:
        wkv, wq, wpref, total = 1.0, 0.0, 0.0, 1.0
    # Normalise the weights first, as upstream does: same operation order, same last bits.
    wkv, wq, wpref = wkv / total, wq / total, wpref / total
    max_q = waiting.max() if len(waiting) else 0.0
    rel_queue = (max_q - waiting) / max_q if max_q > 0 else np.ones_like(waiting)
    composite = wkv * (1.0 - kv) + wq * rel_queue + wpref * prefix
    result: FloatArray = _go_round(_W_MAX * composite) / _W_MAX
    return result


Bucket = Literal[
    "composite",
    "positive",
    "idle",
    "tpot_only_negative",
    "ttft_only_negative",
    "both_negative",
    "no_prediction",
]


def negative_buckets(state: ProfileState, idx: IntArray) -> list[tuple[Bucket, IntArray]]:
    """The all-negative path's preference order: idle, then deficit buckets, then unpredicted."""
    h = state.headroom
    assert h is not None
    has = h.has_pred[idx]
    ttft_neg, tpot_neg = h.ttft_headroom[idx] < 0, h.tpot_headroom[idx] < 0
    idle = has & (state.features.dispatched[idx] == 0)
    return [
        ("idle", idx[idle]),
        ("tpot_only_negative", idx[has & tpot_neg & ~ttft_neg]),
        ("ttft_only_negative", idx[has & ttft_neg & ~tpot_neg]),
        # Upstream also files a pod negative in neither dimension here; it cannot be in this
        # path unless it is positive, which the caller has already handled.
        ("both_negative", idx[has & ttft_neg & tpot_neg]),
        ("no_prediction", idx[~has]),
    ]


@dataclass(frozen=True, slots=True)
class LatencyScorer:
    """latency-scorer. Writes ``state.scores`` (0 for alive pods outside the scored bucket)."""

    policy: SchedulingPolicy
    name: str = "latency-scorer"

    def __call__(self, state: ProfileState) -> Bucket:
        idx = state.alive_idx()
        state.scores[idx] = 0.0
        f, h = state.features, state.headroom
        if h is None or not h.has_pred[idx].any():
            state.scores[idx] = composite_scores(
                f.kv[idx], f.waiting[idx], f.prefix[idx], self.policy
            )
            state.fallback = True
            state.step(self.name, "composite")
            return "composite"
        positive = idx[h.positive[idx]]
        if len(positive):
            self._score(state, positive, least=self.policy.strategy == "least")
            state.step(self.name, "positive")
            return "positive"
        for bucket, members in negative_buckets(state, idx):
            if len(members):
                self._score(state, members, least=True)
                state.step(self.name, bucket)
                return bucket
        raise AssertionError("unreachable: alive pods fall into some bucket")

    def _score(self, state: ProfileState, members: IntArray, *, least: bool) -> None:
        h = state.headroom
        assert h is not None
        state.scores[members] = score_bucket(
            h.ttft_headroom[members],
            h.tpot_headroom[members],
            self.policy.ttft_weight,
            self.policy.tpot_weight,
            least,
        )
