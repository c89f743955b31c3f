"""Pickers: choose one pod among the alive, scored ones.

``WeightedRandomPicker`` is upstream's lottery. ``BestFitPicker`` is ours: the same preference
order, decided deterministically on the headroom itself rather than by a draw on quantised scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backend.scheduling.scorer import IntArray, negative_buckets
from backend.scheduling.state import ProfileState
from backend.scheduling.types import FloatArray, SchedulingPolicy


class Picker(Protocol):
    @property
    def name(self) -> str: ...

    def __call__(self, state: ProfileState) -> int: ...


@dataclass(frozen=True, slots=True)
class WeightedRandomPicker:
    """weighted-random-picker: A-Res weighted reservoir sampling, one pod.

    Each pod with score w > 0 draws key = U^(1/w), U uniform in (0, 1); the largest key wins, so a
    pod wins with probability proportional to its score. Pods with score <= 0 get key 0; when no
    pod scores above 0 the pick is uniform.
    """

    name: str = "weighted-random-picker"

    def __call__(self, state: ProfileState) -> int:
        idx = state.alive_idx()
        scores = state.scores[idx]
        if not (scores > 0).any():
            state.step(self.name, "uniform (no positive score)")
            return int(idx[state.rng.randrange(len(idx))])
        best, best_key = -1, -1.0
        for i, score in zip(idx.tolist(), scores.tolist(), strict=True):
            key = 0.0
            if score > 0:
                u = state.rng.random()
                key = (u if u > 0 else 1e-10) ** (1.0 / score)
            if key > best_key:
                best, best_key = i, key
        state.step(self.name, "a-res")
        return best


@dataclass(frozen=True, slots=True)
class BestFitPicker:
    """Deterministic best fit on combined headroom (weights as the scorer's, in ms).

    Pods meeting both SLOs: ``least`` takes the smallest combined headroom (the pod that still
    meets the SLO with the least slack, keeping roomier pods free for bursts), ``most`` the
    largest. None meets them: upstream's preference order (idle, then TPOT-only, TTFT-only, both
    negative) and within it the smallest weighted SLO miss. No predictions: the highest composite
    score. Ties go to the alphabetically first name.
    """

    policy: SchedulingPolicy
    name: str = "best-fit-picker"

    def __call__(self, state: ProfileState) -> int:
        idx = state.alive_idx()
        names = state.features.names
        h = state.headroom
        if h is None or not h.has_pred[idx].any():
            state.step(self.name, "highest composite score")
            return int(min(idx.tolist(), key=lambda i: (-state.scores[i], names[i])))
        positive = idx[h.positive[idx]]
        if len(positive):
            sign = 1.0 if self.policy.strategy == "least" else -1.0
            state.step(self.name, f"{self.policy.strategy} combined headroom")
            return int(min(positive.tolist(), key=lambda i: (sign * h.combined[i], names[i])))
        deficit = self.policy.ttft_weight * np.maximum(
            0.0, -h.ttft_headroom
        ) + self.policy.tpot_weight * np.maximum(0.0, -h.tpot_headroom)
        for bucket, members in negative_buckets(state, idx):
            if len(members):
                state.step(self.name, f"smallest deficit ({bucket})")
                return _argmin(members, deficit, -h.combined, names)
        raise AssertionError("unreachable: alive pods fall into some bucket")


def _argmin(
    members: IntArray, first: FloatArray, second: FloatArray, names: tuple[str, ...]
) -> int:
    return int(min(members.tolist(), key=lambda i: (first[i], second[i], names[i])))
