"""Builders shared by the scheduling tests: pods, fixed predictors, a bare profile state."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from backend.scheduling.headroom import compute_headroom
from backend.scheduling.state import Features, ProfileState
from backend.scheduling.types import Candidate, Predictor, SchedulingPolicy, SchedulingRequest


def pod(name: str, **fields: Any) -> Candidate:
    """A busy, warm pod unless told otherwise (not idle, not cold: the admitter can shed)."""
    base: dict[str, Any] = {
        "kv_cache_percentage": 0.5,
        "input_token_length": 1000,
        "num_request_waiting": 1,
        "num_request_running": 4,
        "prefix_cache_score": 0.0,
    }
    base.update(fields)
    return Candidate(name=name, **base)


def fixed(ttft: Mapping[str, float], tpot: Mapping[str, float] | None = None) -> Predictor:
    """A predictor answering from tables by pod name (missing name -> NaN: no prediction)."""

    def predict(
        candidates: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray]:
        t = np.array([ttft.get(c.name, np.nan) for c in candidates], dtype=np.float64)
        p = np.array([(tpot or {}).get(c.name, 10.0) for c in candidates], dtype=np.float64)
        return t, p

    return predict


def state_for(
    candidates: Sequence[Candidate],
    ttft: Sequence[float] | None,
    tpot: Sequence[float] | None = None,
    request: SchedulingRequest | None = None,
    policy: SchedulingPolicy | None = None,
    seed: int = 0,
) -> ProfileState:
    """A profile state with headroom computed, every pod alive: for plugin-level tests."""
    request = request or SchedulingRequest(prompt_tokens=1000)
    policy = policy or SchedulingPolicy()
    features = Features.of(candidates)
    n = len(candidates)
    headroom = None
    if ttft is not None:
        tp = np.asarray(tpot if tpot is not None else [10.0] * n, dtype=np.float64)
        headroom = compute_headroom(
            features, np.asarray(ttft, dtype=np.float64), tp, request, policy
        )
    return ProfileState(
        "default", features, headroom, np.ones(n, dtype=np.bool_), [None] * n, random.Random(seed)
    )


def alive_names(state: ProfileState) -> list[str]:
    return [state.features.names[i] for i in state.alive_idx().tolist()]


def scores_by_name(state: ProfileState) -> dict[str, float]:
    return dict(zip(state.features.names, state.scores.tolist(), strict=True))
