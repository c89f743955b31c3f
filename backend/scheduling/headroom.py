"""Headroom = SLO - predicted latency, by the predicted-latency-producer's rules.

Upstream rules, reproduced exactly:

* TTFT: headroom = SLO - predicted, valid iff predicted < SLO. A missing SLO header parses as 0,
  so without an SLO the headroom is -predicted (always negative) and the pod is never "valid";
  the scorer then simply prefers the lowest predicted latency.
* TPOT counts only in streaming mode: buffered = SLO * sloBufferFactor, tightened to
  min(buffered, minRunningTPOTSLO * sloBufferFactor) when requests already running on the pod
  carry a stricter TPOT SLO (they would suffer from a heavier batch); headroom = buffered -
  predicted. Non-streaming, and on prefill-role pods, TPOT is neutralised: valid, headroom 0.
"""

from __future__ import annotations

import numpy as np

from backend.scheduling.state import Features, Headroom
from backend.scheduling.types import BoolArray, FloatArray, SchedulingPolicy, SchedulingRequest


def compute_headroom(
    features: Features,
    ttft: FloatArray,
    tpot: FloatArray,
    request: SchedulingRequest,
    policy: SchedulingPolicy,
    *,
    count_ttft: BoolArray | None = None,
    count_tpot: BoolArray | None = None,
    tier_tpot: FloatArray | None = None,
) -> Headroom:
    """Headroom per pod. ``count_*`` override which pods a dimension counts on (P/D profiles);
    by default TTFT counts everywhere and TPOT per the streaming / prefill-role rule.
    ``tier_tpot``: the TPOT the tier decision compares with the SLO instead of ``tpot`` (a
    calibrated p90; NaN entries fall back to ``tpot``); scoring keeps the mean."""
    n = len(features.names)
    if count_ttft is None:
        count_ttft = np.ones(n, dtype=np.bool_)
    if count_tpot is None:
        streaming = policy.streaming_mode and request.stream
        count_tpot = np.full(n, streaming, dtype=np.bool_) & ~features.is_prefill

    ttft_slo = request.ttft_slo_ms or 0.0
    ttft_headroom = np.where(count_ttft, ttft_slo - ttft, 0.0)
    ttft_valid = np.where(count_ttft, ttft < ttft_slo, True)

    buffered = (request.tpot_slo_ms or 0.0) * policy.slo_buffer_factor
    running_min = features.min_running_tpot_slo * policy.slo_buffer_factor
    buffered_per_pod = np.where(
        features.min_running_tpot_slo > 0, np.minimum(buffered, running_min), buffered
    )
    tpot_headroom = np.where(count_tpot, buffered_per_pod - tpot, 0.0)
    tpot_valid = np.where(count_tpot, tpot < buffered_per_pod, True)

    # A pod has a prediction when every dimension that counts on it was predicted; a routing-only
    # predictor may return no TPOT at all, which is fine wherever TPOT is neutral.
    has_pred = (np.isfinite(ttft) | ~count_ttft) & (np.isfinite(tpot) | ~count_tpot)
    # With both dimensions neutral nothing above was checked; still require the TTFT prediction.
    has_pred &= count_ttft | count_tpot | np.isfinite(ttft)
    ttft_headroom = np.where(has_pred, ttft_headroom, 0.0)
    tpot_headroom = np.where(has_pred, tpot_headroom, 0.0)
    ttft_valid &= has_pred
    tpot_valid &= has_pred
    combined = policy.ttft_weight * ttft_headroom + policy.tpot_weight * tpot_headroom
    tier_headroom = None
    if tier_tpot is not None:
        upper = np.where(np.isfinite(tier_tpot), tier_tpot, tpot)
        tier_headroom = np.where(has_pred & count_tpot, buffered_per_pod - upper, 0.0)
    return Headroom(
        ttft=ttft,
        tpot=tpot,
        has_pred=has_pred,
        ttft_headroom=ttft_headroom,
        tpot_headroom=tpot_headroom,
        ttft_valid=ttft_valid,
        tpot_valid=tpot_valid,
        combined=combined,
        tier_tpot_headroom=tier_headroom,
    )
