"""Scheduling profiles (filters -> scorer -> picker), the predictor call and the trace builder.

Shared by the single-profile chains in ``chain`` and the prefill/decode profiles in ``pd``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from backend.scheduling.filters import Filter, PrefixAffinityFilter, SloHeadroomTierFilter
from backend.scheduling.interference import InterferenceScorer
from backend.scheduling.pickers import BestFitPicker, Picker, WeightedRandomPicker
from backend.scheduling.scorer import LatencyScorer
from backend.scheduling.state import Features, Headroom, ProfileState
from backend.scheduling.types import (
    BoolArray,
    Candidate,
    CandidateTrace,
    FloatArray,
    Predictor,
    SchedulingPolicy,
    SchedulingRequest,
    Tier,
)

STRICT_AFFINITY = "strict-affinity-filter"
LOOSE_AFFINITY = "loose-affinity-filter"


@dataclass(frozen=True, slots=True)
class Profile:
    """A scheduling profile: filters in order, then the scorer, then the picker."""

    name: str
    filters: tuple[Filter, ...]
    scorer: LatencyScorer | InterferenceScorer
    picker: Picker

    def run(self, state: ProfileState) -> int:
        for f in self.filters:
            f(state)
        self.scorer(state)
        return self.picker(state)


def make_picker(policy: SchedulingPolicy) -> Picker:
    if policy.picker == "best_fit":
        return BestFitPicker(policy)
    return WeightedRandomPicker()


def affinity_filter(policy: SchedulingPolicy, strict: bool) -> PrefixAffinityFilter:
    return PrefixAffinityFilter(
        name=STRICT_AFFINITY if strict else LOOSE_AFFINITY,
        threshold=policy.strict_affinity_threshold if strict else policy.loose_affinity_threshold,
        exploration_probability=policy.affinity_exploration_probability,
        max_ttft_penalty_ms=policy.max_ttft_penalty_ms,
    )


def chain_filters(policy: SchedulingPolicy) -> tuple[Filter, ...]:
    if policy.mode == "routing":
        return (affinity_filter(policy, strict=False),)
    return (
        affinity_filter(policy, strict=True),
        SloHeadroomTierFilter(policy.epsilon_explore_neg),
        affinity_filter(policy, strict=False),
    )


def build_profile(policy: SchedulingPolicy) -> Profile:
    """The mode's single-profile chain: routing-only or SLO-aware."""
    scorer = LatencyScorer(policy) if policy.scorer == "headroom" else InterferenceScorer(policy)
    return Profile("default", chain_filters(policy), scorer, make_picker(policy))


@dataclass(frozen=True, slots=True)
class Predictions:
    ttft: FloatArray | None  # None: unavailable, fall back
    tpot: FloatArray | None
    error: str | None
    tpot_p90: FloatArray | None = None  # the predictor's calibrated p90, when it gives one

    def tier_tpot(self, policy: SchedulingPolicy) -> FloatArray | None:
        """The TPOT the tier decision compares: the p90 when the policy asks and it exists."""
        return self.tpot_p90 if policy.tpot_tier_quantile == "p90" else None


def predict(
    predictor: Predictor | None,
    candidates: Sequence[Candidate],
    request: SchedulingRequest,
) -> Predictions:
    """Call the predictor defensively: any failure becomes "no predictions", with the reason."""
    if predictor is None:
        return Predictions(None, None, "no predictor configured")
    n = len(candidates)
    try:
        raw = predictor(candidates, request)
        ttft = np.asarray(raw[0], dtype=np.float64).reshape(-1)
        tpot = np.asarray(raw[1], dtype=np.float64).reshape(-1)
        # An optional third array: the calibrated TPOT p90 (None or absent: the mean only).
        third = raw[2] if len(raw) > 2 else None
        p90 = None if third is None else np.asarray(third, dtype=np.float64).reshape(-1)
    except Exception as exc:  # a failing predictor must never fail the request
        return Predictions(None, None, f"predictor failed: {type(exc).__name__}: {exc}")
    if ttft.shape != (n,) or tpot.shape != (n,):
        return Predictions(
            None, None, f"predictor returned {ttft.shape}/{tpot.shape} for {n} candidates"
        )
    if not np.isfinite(ttft).any():
        return Predictions(None, None, "predictor returned no finite TTFT")
    if p90 is not None and p90.shape != (n,):
        p90 = None  # a malformed optional extra is ignored, not a reason to fall back
    # Clipped at 0 as upstream's prediction server does; NaN stays "no prediction for this pod".
    return Predictions(
        np.maximum(ttft, 0.0),
        np.maximum(tpot, 0.0),
        None,
        None if p90 is None else np.maximum(p90, 0.0),
    )


def _opt(x: float) -> float | None:
    return x if math.isfinite(x) else None


@dataclass(frozen=True, slots=True)
class _Columns:
    """One profile's per-pod values as Python lists (one conversion, not one per pod)."""

    ttft: list[float]
    tpot: list[float]
    ttft_headroom: list[float]
    tpot_headroom: list[float]
    combined: list[float]
    valid: list[bool | None]
    tier: list[Tier | None]
    scores: list[float]

    @classmethod
    def of(cls, state: ProfileState) -> _Columns:
        h, n = state.headroom, len(state.features.names)
        if h is None:
            nan = [float("nan")] * n
            return cls(nan, nan, nan, nan, nan, [None] * n, [None] * n, state.scores.tolist())
        has = h.has_pred.tolist()
        tiers: list[Tier | None] = [
            None if not p else "positive" if pos else "negative"
            for pos, p in zip(h.positive.tolist(), has, strict=True)
        ]
        return cls(
            ttft=h.ttft.tolist(),
            tpot=h.tpot.tolist(),
            ttft_headroom=np.where(h.has_pred, h.ttft_headroom, np.nan).tolist(),
            tpot_headroom=np.where(h.has_pred, h.tpot_headroom, np.nan).tolist(),
            combined=np.where(h.has_pred, h.combined, np.nan).tolist(),
            valid=[bool(v) if p else None for v, p in zip(h.valid.tolist(), has, strict=True)],
            tier=tiers,
            scores=state.scores.tolist(),
        )


def build_traces(
    candidates: Sequence[Candidate],
    owners: Sequence[tuple[ProfileState, BoolArray]],
    transfer_ms: Sequence[float | None] | None = None,
    only: Collection[str | None] | None = None,
) -> tuple[CandidateTrace, ...]:
    """Per-candidate traces; candidate i's values come from the first profile whose mask has i.
    With ``only``, the traces of the candidates so named alone (in candidate order)."""
    columns = [(state, _Columns.of(state)) for state, _ in owners]
    masks = [mask.tolist() for _, mask in owners]
    traces = []
    for i, c in enumerate(candidates):
        if only is not None and c.name not in only:
            continue
        state, col = columns[next(k for k, mask in enumerate(masks) if mask[i])]
        traces.append(
            CandidateTrace(
                name=c.name,
                role=c.role,
                pod_class=c.pod_class,
                profile=state.profile,
                ttft_ms=_opt(col.ttft[i]),
                tpot_ms=_opt(col.tpot[i]),
                ttft_headroom_ms=_opt(col.ttft_headroom[i]),
                tpot_headroom_ms=_opt(col.tpot_headroom[i]),
                combined_headroom_ms=_opt(col.combined[i]),
                valid=col.valid[i],
                tier=col.tier[i],
                score=_opt(col.scores[i]),
                removed_by=state.removed_by[i],
                transfer_ms=None if transfer_ms is None else transfer_ms[i],
            )
        )
    return tuple(traces)


def new_state(
    profile: str,
    features: Features,
    headroom: Headroom | None,
    rng: random.Random,
) -> ProfileState:
    n = len(features.names)
    return ProfileState(profile, features, headroom, np.ones(n, dtype=np.bool_), [None] * n, rng)
