"""Filters: soft, probabilistic narrowing of the candidate set (upstream's filter plugins).

Every filter keeps at least one pod: when its rule would leave nothing it keeps what it got.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backend.scheduling.state import ProfileState


class Filter(Protocol):
    @property
    def name(self) -> str: ...

    def __call__(self, state: ProfileState) -> None: ...


@dataclass(frozen=True, slots=True)
class PrefixAffinityFilter:
    """prefix-cache-affinity-filter: keep the "sticky" pods (prefix score >= threshold).

    Idea: a near-full prefix hit turns prefill into a cache lookup, so narrow to the pods holding
    the prompt, unless (a) an exploration draw skips the gate, (b) no pod is sticky (keep all), or
    (c) the TTFT load gate fires: the best sticky pod's predicted TTFT exceeds the best non-sticky
    pod's by more than ``max_ttft_penalty_ms`` (stickiness broken, keep all). With
    ``ttftSource: latencyPredictor`` a side without any prediction skips the gate and keeps all,
    as upstream's ``missing_signal`` outcome does.
    """

    name: str
    threshold: float
    exploration_probability: float
    max_ttft_penalty_ms: float

    def __call__(self, state: ProfileState) -> None:
        idx = state.alive_idx()
        if len(idx) <= 1 or self.threshold <= 0:
            state.step(self.name, "not_applicable")
            return
        if state.rng.random() < self.exploration_probability:
            state.step(self.name, "exploration")
            return
        sticky_mask = state.features.prefix[idx] >= self.threshold
        sticky, non_sticky = idx[sticky_mask], idx[~sticky_mask]
        if len(sticky) == 0:
            state.step(self.name, "no_match")
            return
        if self.max_ttft_penalty_ms > 0 and len(non_sticky) > 0:
            predicted = state.predicted()
            sticky_pred, non_sticky_pred = (
                sticky[predicted[sticky]],
                non_sticky[predicted[non_sticky]],
            )
            if len(sticky_pred) == 0 or len(non_sticky_pred) == 0 or state.headroom is None:
                state.step(self.name, "missing_signal")
                return
            ttft = state.headroom.ttft
            penalty = float(ttft[sticky_pred].min() - ttft[non_sticky_pred].min())
            if penalty > self.max_ttft_penalty_ms:
                state.step(self.name, f"load_override (penalty {penalty:.0f} ms)")
                return
        state.remove(non_sticky, self.name)
        state.step(self.name, "sticky")


@dataclass(frozen=True, slots=True)
class SloHeadroomTierFilter:
    """slo-headroom-tier-filter: keep the tier that meets the SLO, explore the other rarely.

    Positive tier: TTFT and TPOT headroom both >= 0; everything else, and pods without a
    prediction, is the negative tier. With both tiers present keep the negative one with
    probability ``epsilon_explore_neg`` (so recovering pods keep producing samples), otherwise the
    positive one; with one tier keep it; with no predictions at all keep everyone.
    """

    epsilon_explore_neg: float
    name: str = "slo-headroom-tier-filter"

    def __call__(self, state: ProfileState) -> None:
        idx = state.alive_idx()
        if len(idx) <= 1:
            state.step(self.name, "not_applicable")
            return
        if state.headroom is None or not state.headroom.has_pred[idx].any():
            state.step(self.name, "no_predictions")
            return
        positive_mask = state.headroom.positive[idx]
        positive, negative = idx[positive_mask], idx[~positive_mask]
        if len(positive) and len(negative):
            if state.rng.random() < self.epsilon_explore_neg:
                state.remove(positive, self.name)
                state.step(self.name, "explore_negative")
            else:
                state.remove(negative, self.name)
                state.step(self.name, "positive")
        elif len(positive):
            state.step(self.name, "only_positive")
        else:
            state.step(self.name, "only_negative")


@dataclass(frozen=True, slots=True)
class RoleFilter:
    """P/D: upstream's decode-filter (role decode or unlabelled) or prefill-filter (prefill)."""

    role: str  # "prefill" or "decode"

    @property
    def name(self) -> str:
        return f"{self.role}-filter"

    def __call__(self, state: ProfileState) -> None:
        f = state.features
        keep = f.is_prefill if self.role == "prefill" else f.decode_capable
        state.remove(np.flatnonzero(state.alive & ~keep), self.name)
        state.step(self.name, self.role)
