"""interference-scorer: price what a placement does to the requests already on the pod.

The latency-scorer looks only at the new request's own predicted headroom. A long prefill also
slows every decode running on the pod (its chunks share steps with their tokens) and delays the
requests that queue behind it. This scorer asks the same learned models what the pod looks like
*after* the placement: one more predictor call on counterfactual candidates, each pod's gauges
with the new request added (one more request running, or waiting when the pod already queues;
its uncached prompt tokens in prefill flight; one more dispatched). Per pod it sums the expected
SLO misses, each a probability (``miss_probability``: log-normal error around the prediction):

* **own**: the new request misses its TTFT or TPOT SLO on that pod;
* **tpot** (running requests): the rise, from the present to the counterfactual predicted TPOT,
  of each running request's chance to miss its TPOT SLO. Its SLOs are the candidate's
  ``running_tpot_slos_ms``; without any, the pod's running requests are assumed to carry the
  new request's TPOT SLO (a pool usually serves one SLO class);
* **queue** (requests queued behind it): the rise of the next arrival's chance to miss the TTFT
  SLO, predicted on the counterfactual pod, times the requests already waiting there plus that
  next one.

The pods within ``BAND`` of the fewest expected misses stay; the latency-scorer then scores them
as usual, so near-ties go to the existing headroom rule. Without predictions, or without the
counterfactual call, the scorer is the latency-scorer unchanged. Headroom-only: no upstream EPP
plugin does this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

import numpy as np

from backend.scheduling.scorer import Bucket, LatencyScorer
from backend.scheduling.state import Features, Headroom, ProfileState
from backend.scheduling.types import (
    Candidate,
    FloatArray,
    SchedulingPolicy,
    SchedulingRequest,
)

Term = Literal["tpot", "queue"]
TERMS: Final[dict[str, tuple[Term, ...]]] = {
    "interference": ("tpot", "queue"),
    "interference_tpot": ("tpot",),
    "interference_queue": ("queue",),
}
"""Scorer name -> the interference terms it counts (the last two are the ablations)."""
NAME: Final = "interference-scorer"


def counterfactual(c: Candidate, request: SchedulingRequest) -> Candidate:
    """``c`` as it would look with the request placed on it (its uncached tokens in flight)."""
    uncached = round(request.prompt_tokens * (1.0 - min(max(c.prefix_cache_score, 0.0), 1.0)))
    queues = c.num_request_waiting > 0  # FCFS: behind a queue it waits; else it joins the batch
    return replace(
        c,
        num_request_waiting=c.num_request_waiting + (1 if queues else 0),
        num_request_running=c.num_request_running + (0 if queues else 1),
        prefill_tokens_in_flight=c.prefill_tokens_in_flight + uncached,
        dispatched_requests=c.in_flight + 1,
    )


MISS_SPREAD: Final = 0.3
"""Spread of log(actual / predicted) latency: the learned models' errors are 20-30 % (MAPE;
docs/benchmarks.md), and a miss is priced as a probability, not as the predicted mean crossing
the SLO, so that a pod pushed from 60 to 90 ms against a 100 ms SLO costs something."""
BAND: Final = 0.05
"""Pods within this many expected misses of the fewest are equivalent; the headroom rule picks
among them (expected misses are estimates, their last hundredths are noise)."""


def miss_probability(predicted: FloatArray | float, slo: FloatArray | float) -> FloatArray:
    """P(actual > slo) for a log-normal actual around ``predicted`` (0 where no SLO is set).

    The normal CDF by its logistic approximation (1.702 z; off by under 0.01): numpy has no erf.
    """
    pred = np.maximum(np.asarray(predicted, dtype=np.float64), 1e-9)
    bound = np.asarray(slo, dtype=np.float64)
    z = (np.log(pred) - np.log(np.maximum(bound, 1e-9))) / MISS_SPREAD
    p: FloatArray = np.where(bound > 0, 1.0 / (1.0 + np.exp(-1.702 * z)), 0.0)
    return p


def _running_slos(c: Candidate, request: SchedulingRequest) -> tuple[float, ...]:
    known = tuple(s for s in c.running_tpot_slos_ms if s > 0)
    if known or not request.tpot_slo_ms:
        return known
    return (request.tpot_slo_ms,) * c.num_request_running


def interference_misses(
    scorer: str,
    request: SchedulingRequest,
    candidates: Sequence[Candidate],
    features: Features,
    headroom: Headroom,
    after_ttft: FloatArray,
    after_tpot: FloatArray,
    policy: SchedulingPolicy,
) -> FloatArray:
    """Expected SLO misses per pod if the request goes there (NaN: no prediction for the pod).

    ``after_*`` are the predictions on the counterfactual candidates (:func:`counterfactual`).
    """
    terms = TERMS[scorer]
    ttft_slo, tpot_slo = request.ttft_slo_ms or 0.0, request.tpot_slo_ms or 0.0
    # Like the headroom rule, TPOT counts only for streamed requests and off prefill-role pods.
    tpot_counts = (policy.streaming_mode and request.stream) & ~features.is_prefill
    own_ttft = miss_probability(headroom.ttft, ttft_slo)
    own_tpot = np.where(
        tpot_counts, miss_probability(headroom.tpot, tpot_slo * policy.slo_buffer_factor), 0.0
    )
    misses = 1.0 - (1.0 - own_ttft) * (1.0 - own_tpot)
    if "tpot" in terms:
        for i, c in enumerate(candidates):
            if not tpot_counts[i]:
                continue
            slos = np.asarray(_running_slos(c, request)) * policy.slo_buffer_factor
            added = miss_probability(after_tpot[i], slos) - miss_probability(headroom.tpot[i], slos)
            # A placement never helps the running requests; a negative difference is model noise.
            misses[i] += float(np.maximum(added, 0.0).sum())
    if "queue" in terms:
        added = miss_probability(after_ttft, ttft_slo) - own_ttft
        misses += (features.waiting + 1.0) * np.maximum(added, 0.0)
    has = headroom.has_pred & np.isfinite(after_ttft) & np.isfinite(after_tpot)
    result: FloatArray = np.where(has, misses, np.nan)
    return result


@dataclass(frozen=True, slots=True)
class InterferenceScorer:
    """Keeps the alive pods with the fewest expected misses, then the latency-scorer decides."""

    policy: SchedulingPolicy
    name: str = NAME

    def __call__(self, state: ProfileState) -> Bucket:
        misses = state.interference
        idx = state.alive_idx()
        if misses is not None:
            predicted = idx[np.isfinite(misses[idx])]
            if len(predicted):
                fewest = float(misses[predicted].min())
                state.remove(idx[~(misses[idx] <= fewest + BAND)], self.name)
                state.step(self.name, f"fewest expected SLO misses ({fewest:.2f})")
        return LatencyScorer(self.policy)(state)
