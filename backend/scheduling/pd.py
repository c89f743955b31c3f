"""Prefill/decode disaggregation: upstream's greedy D-then-P, and our joint pair selection.

Greedy (upstream): the decode profile picks D on predicted TPOT alone (TTFT neutral; TPOT counts
there even for non-streamed requests, since it is all D is chosen on); then the prefill profile
picks P on predicted TTFT alone (TPOT neutral on prefill pods), prefix-hit pods first, each by its
own lottery. Nobody prices the KV transfer between them.

Joint (ours): over every (P, D) pair, minimise the predicted end-to-end cost
``TTFT(P) + transfer(P, D) + expected_output_tokens * TPOT(D)``, among the pairs that meet the
request's SLOs when it has any (TTFT(P) + transfer within the TTFT SLO, D within its buffered
TPOT SLO), else among all pairs. Deterministic; ties go to the alphabetically first pair. The
greedy chain still runs so that both pairs' predicted costs are reported side by side.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from backend.scheduling.admitter import Admission, admit
from backend.scheduling.filters import RoleFilter, SloHeadroomTierFilter
from backend.scheduling.headroom import compute_headroom
from backend.scheduling.profiles import (
    Predictions,
    Profile,
    build_traces,
    chain_filters,
    make_picker,
    new_state,
)
from backend.scheduling.scorer import LatencyScorer
from backend.scheduling.state import Features, ProfileState
from backend.scheduling.transfer import IntArray, PairCosts, TransferModel, pair_costs
from backend.scheduling.types import (
    BoolArray,
    Candidate,
    Decision,
    FloatArray,
    PDTrace,
    SchedulingPolicy,
    SchedulingRequest,
    StepTrace,
)


def decode_profile(policy: SchedulingPolicy) -> Profile:
    tier = (SloHeadroomTierFilter(policy.epsilon_explore_neg),) if policy.mode == "slo" else ()
    return Profile(
        "decode", (RoleFilter("decode"), *tier), LatencyScorer(policy), make_picker(policy)
    )


def prefill_profile(policy: SchedulingPolicy) -> Profile:
    return Profile(
        "prefill",
        (RoleFilter("prefill"), *chain_filters(policy)),
        LatencyScorer(policy),
        make_picker(policy),
    )


def schedule_pd(
    request: SchedulingRequest,
    candidates: Sequence[Candidate],
    features: Features,
    preds: Predictions,
    policy: SchedulingPolicy,
    rng: random.Random,
    model: TransferModel,
    *,
    traces: bool = True,
) -> Decision:
    n = len(candidates)
    p_mask, d_mask = features.is_prefill, features.decode_capable
    ones, zeros = np.ones(n, dtype=np.bool_), np.zeros(n, dtype=np.bool_)
    hp = hd = None
    if preds.ttft is not None and preds.tpot is not None:
        hp = compute_headroom(
            features, preds.ttft, preds.tpot, request, policy, count_ttft=ones, count_tpot=zeros
        )
        hd = compute_headroom(
            features,
            preds.ttft,
            preds.tpot,
            request,
            policy,
            count_ttft=zeros,
            count_tpot=ones,
            tier_tpot=preds.tier_tpot(policy),
        )
    d_state = new_state("decode", features, hd, rng)
    p_state = new_state("prefill", features, hp, rng)

    if policy.mode == "slo":
        admission = admit(
            request,
            features,
            has_predictions=hp is not None
            and hd is not None
            and bool((hp.has_pred & p_mask).any() or (hd.has_pred & d_mask).any()),
            # One role valid is not enough: the request needs a prefill and a decode pod.
            has_valid=hp is not None
            and hd is not None
            and bool((hp.valid & p_mask).any() and (hd.valid & d_mask).any()),
        )
        steps = [StepTrace("pd", "latency-slo-admitter", admission.reason, n)]
    else:
        admission = Admission(True, "admitted: the routing-only chain has no admitter")
        steps = []
    if not admission.admitted:
        return _decision(
            admission, d_state, p_state, candidates, policy, preds, steps, traces=traces
        )

    d_pick = decode_profile(policy).run(d_state)
    p_pick = prefill_profile(policy).run(p_state)
    steps += d_state.steps + p_state.steps

    p_idx, d_idx = np.flatnonzero(p_mask), np.flatnonzero(d_mask)
    costs = pair_costs(
        [candidates[i] for i in p_idx.tolist()],
        [candidates[j] for j in d_idx.tolist()],
        request.prompt_tokens,
        model,
    )
    e2e: FloatArray = np.full(costs.transfer_ms.shape, np.nan)
    meets: BoolArray = np.zeros(costs.transfer_ms.shape, dtype=np.bool_)
    if preds.ttft is not None and preds.tpot is not None and hd is not None:
        first_token = preds.ttft[p_idx][:, None] + costs.transfer_ms
        e2e = first_token + policy.expected_output_tokens * preds.tpot[d_idx][None, :]
        meets = np.isfinite(e2e)
        if request.ttft_slo_ms:
            meets &= first_token <= request.ttft_slo_ms
        if request.tpot_slo_ms:
            meets &= (hd.tpot_headroom[d_idx] >= 0)[None, :]

    greedy = (_position(p_idx, p_pick), _position(d_idx, d_pick))
    chosen, joint, note = greedy, False, ""
    if policy.pd_selection == "joint":
        pool = meets if meets.any() else np.isfinite(e2e)
        if pool.any():
            chosen, joint = _cheapest(pool, e2e, p_idx, d_idx, features.names), True
            if not meets.any() and (request.ttft_slo_ms or request.tpot_slo_ms):
                note = "; no pair is predicted to meet the SLO, took the cheapest"
        else:
            note = "; joint selection needs predictions, kept the greedy pair"

    pd = _pd_trace(policy, joint, chosen, greedy, costs, e2e, meets, p_idx, d_idx, features)
    # Each pod's transfer to or from its chosen partner, so the trace shows what a pair costs.
    transfer: list[float | None] = [None] * n
    for row, i in enumerate(p_idx.tolist()):
        transfer[i] = float(costs.transfer_ms[row, chosen[1]])
    for col, j in enumerate(d_idx.tolist()):
        transfer[j] = float(costs.transfer_ms[chosen[0], col])
    return _decision(
        admission,
        d_state,
        p_state,
        candidates,
        policy,
        preds,
        steps,
        pd,
        transfer,
        note,
        traces=traces,
    )


def _position(indices: IntArray, value: int) -> int:
    return int(np.flatnonzero(indices == value)[0])


def _cheapest(
    pool: BoolArray,
    e2e: FloatArray,
    p_idx: IntArray,
    d_idx: IntArray,
    names: tuple[str, ...],
) -> tuple[int, int]:
    """The cheapest pair in ``pool``; exact ties go to the alphabetically first (P, D) names."""
    masked = np.where(pool, e2e, np.inf)
    rows, cols = np.nonzero(masked == masked.min())
    pairs = zip(rows.tolist(), cols.tolist(), strict=True)
    return min(pairs, key=lambda rc: (names[p_idx[rc[0]]], names[d_idx[rc[1]]]))


def _opt(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _pd_trace(
    policy: SchedulingPolicy,
    joint: bool,
    chosen: tuple[int, int],
    greedy: tuple[int, int],
    costs: PairCosts,
    e2e: FloatArray,
    meets: BoolArray,
    p_idx: IntArray,
    d_idx: IntArray,
    features: Features,
) -> PDTrace:
    names = features.names
    chosen_e2e, greedy_e2e = _opt(e2e[chosen]), _opt(e2e[greedy])
    return PDTrace(
        selection="joint" if joint else "greedy",
        expected_output_tokens=policy.expected_output_tokens,
        prefill=names[p_idx[chosen[0]]],
        decode=names[d_idx[chosen[1]]],
        distance=costs.distance(*chosen),
        kv_bytes=int(costs.kv_bytes[chosen[1]]),
        transfer_ms=float(costs.transfer_ms[chosen]),
        e2e_ms=chosen_e2e,
        meets_slo=bool(meets[chosen]) if chosen_e2e is not None else None,
        greedy_prefill=names[p_idx[greedy[0]]],
        greedy_decode=names[d_idx[greedy[1]]],
        greedy_distance=costs.distance(*greedy),
        greedy_transfer_ms=float(costs.transfer_ms[greedy]),
        greedy_e2e_ms=greedy_e2e,
        saved_ms=None if chosen_e2e is None or greedy_e2e is None else greedy_e2e - chosen_e2e,
    )


def _decision(
    admission: Admission,
    d_state: ProfileState,
    p_state: ProfileState,
    candidates: Sequence[Candidate],
    policy: SchedulingPolicy,
    preds: Predictions,
    steps: list[StepTrace],
    pd: PDTrace | None = None,
    transfer: list[float | None] | None = None,
    note: str = "",
    *,
    traces: bool = True,
) -> Decision:
    fallback = d_state.fallback or p_state.fallback
    reason = admission.reason
    if pd is not None:
        how = "composite heuristic (no predictions)" if fallback else "predicted latency"
        reason = (
            f"{reason}; P/D {pd.selection} by {how}: prefill {pd.prefill} -> decode {pd.decode}"
        )
        if pd.e2e_ms is not None:
            reason += f", predicted e2e {pd.e2e_ms:.1f} ms"
        if pd.selection == "joint" and pd.greedy_e2e_ms is not None:
            reason += (
                f" (greedy pair {pd.greedy_prefill} -> {pd.greedy_decode}: "
                f"{pd.greedy_e2e_ms:.1f} ms)"
            )
        reason += note
    f = d_state.features
    return Decision(
        admitted=admission.admitted,
        reason=reason,
        chosen=None if pd is None else pd.decode,
        prefill=None if pd is None else pd.prefill,
        decode=None if pd is None else pd.decode,
        fallback=fallback,
        mode=policy.mode,
        picker=policy.picker,
        candidates=build_traces(
            candidates,
            [(d_state, f.decode_capable), (p_state, f.is_prefill)],
            transfer,
            only=None if traces or pd is None else {pd.prefill, pd.decode},
        ),
        steps=tuple(steps),
        pd=pd,
        predictor_error=preds.error,
    )
