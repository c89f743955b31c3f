"""Pool saturation from predicted latency: would a representative request meet its SLOs now?

The idea of the llm-d ``latency-detector`` proposal (GAIE #2716, llm-d-router #1141), answered
with the learned models instead of hand-tuned queue and KV thresholds: take the requests the
pool has recently served (their prompt lengths and prefix-cache scores), place each of them on
every pod as the pods stand now, and predict TTFT and TPOT there.

- A pod's level is the share of representative requests that would *miss* an SLO on it.
- The pool's level is the share that would miss an SLO when routed by the pool's own chain
  (the same ``schedule`` that ``/v1/schedule`` runs), so affinity, tiers and the strategy count.

Both are in [0, 1]: 0 means every representative request fits, 1 that none does. A request
counts as missing with the probability that it misses (``MeetProbability``: from the models'
residual spread at the pod's load, ``backend.predictor.calibration.meet_probability``), not 0 or
1 from comparing the mean prediction with the SLO: near saturation about half the requests whose
mean just fits miss, and the 0/1 rule counted them all as meeting (optimistic by 10-17 points on
Azure code at 1.0-1.2x saturation, docs/capacity.md). Without it, the 0/1 rule. Exploration of
the negative tier (``epsilon_explore_neg``) is switched off here: it sends a request to a pod
that is predicted to miss on purpose, which says nothing about capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from backend.scheduling.chain import schedule
from backend.scheduling.types import (
    BoolArray,
    Candidate,
    CandidateTrace,
    FloatArray,
    Predictor,
    SchedulingPolicy,
    SchedulingRequest,
)


@dataclass(frozen=True, slots=True)
class Representative:
    """A request as the pool recently saw it."""

    prompt_tokens: int
    prefix_cache_score: float


RowPredictor = Callable[[Sequence[Candidate]], tuple[FloatArray, FloatArray]]
"""(ttft_ms, tpot_ms) for every row; one call for all request x pod rows."""
MeetProbability = Callable[
    [Sequence[Candidate], FloatArray, FloatArray, float | None, float | None], FloatArray
]
"""P(meeting both SLOs) for every row, given its predicted (ttft_ms, tpot_ms) and the SLOs."""


@dataclass(frozen=True, slots=True)
class PodLevel:
    name: str
    level: float  # share of representative requests that would miss an SLO on this pod
    ttft_ms_p50: float  # predicted TTFT of the median representative request here
    tpot_ms_p50: float


@dataclass(frozen=True, slots=True)
class Headroom:
    """SLO minus predicted latency on the pod the chain picks, for one representative request."""

    prompt_tokens: int
    pod: str | None
    ttft_headroom_ms: float | None
    tpot_headroom_ms: float | None


@dataclass(frozen=True, slots=True)
class Saturation:
    level: float
    meeting_slo: float  # 1 - level
    pods: tuple[PodLevel, ...]
    p50: Headroom
    p90: Headroom
    representatives: int


def _meets(
    ttft: FloatArray, tpot: FloatArray, ttft_slo: float | None, tpot_slo: float | None
) -> BoolArray:
    ok = np.isfinite(ttft) & np.isfinite(tpot)
    # Strictly below, as upstream's IsValid: a prediction equal to the SLO misses it.
    if ttft_slo is not None:
        ok &= ttft < ttft_slo
    if tpot_slo is not None:
        ok &= tpot < tpot_slo
    return ok


def saturation(
    pods: Sequence[Candidate],
    requests: Sequence[Representative],
    policy: SchedulingPolicy,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    predict: RowPredictor,
    meet_probability: MeetProbability | None = None,
) -> Saturation:
    """The pool's and each pod's saturation level. ``pods`` carry their current gauges; their
    ``input_token_length`` and ``prefix_cache_score`` are replaced by each request's. With
    ``meet_probability`` a request misses with its probability of missing; without, by the 0/1
    rule on the mean. The chain still routes on the means, as it does live."""
    if not pods or not requests:
        raise ValueError("saturation needs at least one pod and one representative request")
    # Sorted by prompt length so that the median and p90 requests are found by position.
    reqs = sorted(requests, key=lambda r: (r.prompt_tokens, r.prefix_cache_score))
    n_req, n_pod = len(reqs), len(pods)
    rows = [
        dataclasses.replace(
            pod,
            input_token_length=r.prompt_tokens,
            prefix_cache_score=r.prefix_cache_score,
            num_tokens_generated=1,
        )
        for r in reqs
        for pod in pods
    ]
    ttft_flat, tpot_flat = predict(rows)
    ttft = np.asarray(ttft_flat, dtype=np.float64).reshape(n_req, n_pod)
    tpot = np.asarray(tpot_flat, dtype=np.float64).reshape(n_req, n_pod)
    meets = _meets(ttft, tpot, ttft_slo_ms, tpot_slo_ms).astype(np.float64)
    if meet_probability is not None:
        chance = meet_probability(rows, ttft_flat, tpot_flat, ttft_slo_ms, tpot_slo_ms)
        meets = np.asarray(chance, dtype=np.float64).reshape(n_req, n_pod)

    mid, high = _position(n_req, 0.5), _position(n_req, 0.9)
    pod_levels = tuple(
        PodLevel(
            name=pod.name,
            level=float(1.0 - meets[:, j].mean()),
            ttft_ms_p50=float(ttft[mid, j]),
            tpot_ms_p50=float(tpot[mid, j]),
        )
        for j, pod in enumerate(pods)
    )

    routed = dataclasses.replace(policy, epsilon_explore_neg=0.0)
    picked_ok = np.zeros(n_req, dtype=np.float64)
    headroom: dict[int, Headroom] = {}
    for i, r in enumerate(reqs):
        candidates = rows[i * n_pod : (i + 1) * n_pod]
        row_ttft, row_tpot = ttft[i], tpot[i]
        request = SchedulingRequest(
            prompt_tokens=r.prompt_tokens,
            ttft_slo_ms=ttft_slo_ms,
            tpot_slo_ms=tpot_slo_ms,
            seed=i,  # reproducible: the same state gives the same level
        )
        decision = schedule(request, candidates, routed, _fixed(row_ttft, row_tpot))
        chosen = _trace(decision.candidates, decision.chosen)
        if chosen is not None and decision.admitted:
            j = next(k for k, pod in enumerate(pods) if pod.name == chosen.name)
            picked_ok[i] = meets[i, j]
        if i in (mid, high):
            headroom[i] = Headroom(
                r.prompt_tokens,
                chosen.name if chosen else None,
                chosen.ttft_headroom_ms if chosen else None,
                chosen.tpot_headroom_ms if chosen else None,
            )
    level = float(1.0 - picked_ok.mean())
    return Saturation(level, 1.0 - level, pod_levels, headroom[mid], headroom[high], n_req)


def _fixed(ttft: FloatArray, tpot: FloatArray) -> Predictor:
    """The predictions already made for this request's row of pods, handed to the chain."""

    def predictor(_: Sequence[Candidate], __: SchedulingRequest) -> tuple[FloatArray, FloatArray]:
        return ttft, tpot

    return predictor


def _position(n: int, q: float) -> int:
    return min(n - 1, int(np.floor(q * (n - 1) + 0.5)))


def _trace(traces: Sequence[CandidateTrace], name: str | None) -> CandidateTrace | None:
    return next((t for t in traces if t.name == name), None) if name else None
