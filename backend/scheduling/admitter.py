"""latency-slo-admitter: shed a sheddable request only when predictions say no pod can serve it.

Upstream's rule: priority >= 0 always passes; a request without an SLO passes (validity cannot be
judged); without any prediction it fails open. Otherwise a sheddable request is rejected only if
no pod is valid (both predictions strictly within the SLO), none is idle (scraped running
requests == 0: likely able to serve) and none is cold (KV < 2 %: predictions unreliable there).
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.scheduling.state import Features
from backend.scheduling.types import SchedulingRequest

REJECT_REASON = "request cannot be admitted: no valid endpoint available to serve the request"
COLD_KV_THRESHOLD = 0.02


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    reason: str


def admit(
    request: SchedulingRequest, features: Features, *, has_predictions: bool, has_valid: bool
) -> Admission:
    """Decide admission over all candidates. ``has_valid``: some pod is predicted within both
    SLOs (under P/D: a prefill pod within TTFT and a decode pod within TPOT)."""
    if request.priority >= 0:
        return Admission(True, "admitted: priority >= 0 is never shed")
    if not ((request.ttft_slo_ms or 0.0) > 0 or (request.tpot_slo_ms or 0.0) > 0):
        return Admission(True, "admitted: sheddable request carries no SLO")
    if not has_predictions:
        return Admission(True, "admitted: no predictions, failing open")
    if has_valid:
        return Admission(True, "admitted: a pod is predicted to meet the SLO")
    if (features.running == 0).any():
        return Admission(True, "admitted: no pod meets the SLO but one is idle")
    if (features.kv < COLD_KV_THRESHOLD).any():
        return Admission(True, "admitted: no pod meets the SLO but one is cold (KV < 2 %)")
    return Admission(False, REJECT_REASON)
