"""The plugin chains and ``schedule``, the library's entry point.

The predicted-latency chain (``SchedulingPolicy.chain``, the default); the load chains are in
``load_chains``.

Routing-only (upstream ``predicted-latency.values.yaml``):
    loose-affinity-filter -> latency-scorer -> picker
SLO-aware (routerlib chart default; the admitter runs first, in request control):
    latency-slo-admitter + strict-affinity-filter (0.99) -> slo-headroom-tier-filter
    -> loose-affinity-filter (0.80) -> latency-scorer -> picker

All randomness comes from one ``random.Random(request.seed)``, drawn in chain order, so a decision
with a seed is reproducible. A predictor that raises, returns the wrong shape or returns nothing
finite degrades the decision to the composite heuristic (``fallback=True``); it never drops it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from backend.scheduling.admitter import Admission, admit
from backend.scheduling.headroom import compute_headroom
from backend.scheduling.interference import counterfactual, interference_misses
from backend.scheduling.load_chains import schedule_load_chain
from backend.scheduling.pd import schedule_pd
from backend.scheduling.profiles import Predictions, build_profile, build_traces, new_state, predict
from backend.scheduling.state import Features, ProfileState
from backend.scheduling.transfer import TransferModel
from backend.scheduling.types import (
    Candidate,
    Decision,
    Predictor,
    SchedulingPolicy,
    SchedulingRequest,
    StepTrace,
)


def schedule(
    request: SchedulingRequest,
    candidates: Sequence[Candidate],
    policy: SchedulingPolicy,
    predictor: Predictor | None,
    *,
    transfer_model: TransferModel | None = None,
    traces: bool = True,
) -> Decision:
    """Admit or reject the request and pick its pod (or its prefill and decode pods).

    P/D disaggregation engages when the candidates include prefill-role pods and pods that can
    decode; ``transfer_model`` (default: the policy's configured constants) prices KV transfers.
    With ``traces`` False the decision carries the chosen pods' traces alone (the saturation
    level decides for many requests and reads only those).
    A policy naming a load chain (``llm-d-default``, ``load-prefix``, ``lmetric``) runs it
    instead: no predictor call, no admitter (``backend.scheduling.load_chains``).
    """
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ValueError("candidate names must be unique")
    if policy.chain != "predicted-latency" and candidates:
        return schedule_load_chain(request, candidates, policy)
    rng = random.Random(request.seed)
    if not candidates:
        return Decision(
            False, "no candidate pods", None, None, None, False, policy.mode, policy.picker, (), ()
        )
    features = Features.of(candidates)
    preds = predict(predictor, candidates, request)
    if features.is_prefill.any() and features.decode_capable.any():
        return schedule_pd(
            request,
            candidates,
            features,
            preds,
            policy,
            rng,
            transfer_model or TransferModel(policy.transfer),
            traces=traces,
        )

    headroom = (
        None
        if preds.ttft is None or preds.tpot is None
        else compute_headroom(
            features, preds.ttft, preds.tpot, request, policy, tier_tpot=preds.tier_tpot(policy)
        )
    )
    state = new_state("default", features, headroom, rng)
    admission = _admission(request, policy, features, state)
    if not admission.admitted:
        return _decision(admission, None, state, candidates, policy, preds, traces)
    if policy.scorer != "headroom" and headroom is not None:
        # One more predictor call, on the pods as they would be with the request placed; if it
        # fails the interference scorer is the latency-scorer unchanged.
        after = predict(predictor, [counterfactual(c, request) for c in candidates], request)
        if after.ttft is not None and after.tpot is not None:
            state.interference = interference_misses(
                policy.scorer,
                request,
                candidates,
                features,
                headroom,
                after.ttft,
                after.tpot,
                policy,
            )
    chosen = build_profile(policy).run(state)
    return _decision(admission, chosen, state, candidates, policy, preds, traces)


def _admission(
    request: SchedulingRequest, policy: SchedulingPolicy, features: Features, state: ProfileState
) -> Admission:
    if policy.mode == "routing":
        return Admission(True, "admitted: the routing-only chain has no admitter")
    h = state.headroom
    admission = admit(
        request,
        features,
        has_predictions=h is not None and bool(h.has_pred.any()),
        has_valid=h is not None and bool(h.valid.any()),
    )
    state.steps.append(
        StepTrace(state.profile, "latency-slo-admitter", admission.reason, len(features.names))
    )
    return admission


def _decision(
    admission: Admission,
    chosen: int | None,
    state: ProfileState,
    candidates: Sequence[Candidate],
    policy: SchedulingPolicy,
    preds: Predictions,
    traces: bool = True,
) -> Decision:
    name = None if chosen is None else candidates[chosen].name
    reason = admission.reason
    if name is not None:
        how = "composite heuristic (no predictions)" if state.fallback else "predicted headroom"
        reason = f"{reason}; chose {name} by {how}"
    return Decision(
        admitted=admission.admitted,
        reason=reason,
        chosen=name,
        prefill=None,
        decode=None,
        fallback=state.fallback,
        mode=policy.mode,
        picker=policy.picker,
        candidates=build_traces(
            candidates,
            [(state, np.ones(len(candidates), dtype=np.bool_))],
            only=None if traces else {name},
        ),
        steps=tuple(state.steps),
        predictor_error=preds.error,
    )
