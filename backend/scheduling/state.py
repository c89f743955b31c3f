"""Column arrays of the candidates, and the mutable state one scheduling profile works on.

The plugins are vectorised over these arrays: a request scores every pod of a 100-pod pool, and
per-pod Python objects would dominate the hot path.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from backend.scheduling.types import BoolArray, Candidate, FloatArray, StepTrace


@dataclass(frozen=True, slots=True)
class Features:
    names: tuple[str, ...]
    roles: tuple[str, ...]
    kv: FloatArray
    prefix: FloatArray
    waiting: FloatArray
    running: FloatArray  # scraped num_request_running: the admitter's idle test
    dispatched: FloatArray  # the scorer's idle test (upstream DispatchedRequestCount)
    min_running_tpot_slo: FloatArray  # 0 where no running request carries a TPOT SLO
    is_prefill: BoolArray
    decode_capable: BoolArray  # upstream decode-filter: role decode, or no role label

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> Features:
        n = len(candidates)
        running = np.fromiter((c.num_request_running for c in candidates), np.float64, n)
        dispatched = np.fromiter((c.in_flight for c in candidates), np.float64, n)
        roles = tuple(c.role for c in candidates)
        return cls(
            names=tuple(c.name for c in candidates),
            roles=roles,
            kv=np.fromiter((c.kv_cache_percentage for c in candidates), np.float64, n),
            prefix=np.fromiter((c.prefix_cache_score for c in candidates), np.float64, n),
            waiting=np.fromiter((c.num_request_waiting for c in candidates), np.float64, n),
            running=running,
            dispatched=dispatched,
            min_running_tpot_slo=np.fromiter(
                (_min_positive(c.running_tpot_slos_ms) for c in candidates), np.float64, n
            ),
            is_prefill=np.fromiter((r == "prefill" for r in roles), np.bool_, n),
            decode_capable=np.fromiter((r != "prefill" for r in roles), np.bool_, n),
        )


def _min_positive(slos: tuple[float, ...]) -> float:
    # Upstream's running-request queue only holds requests that carried a TPOT SLO (> 0).
    positive = [s for s in slos if s > 0]
    return min(positive) if positive else 0.0


@dataclass(frozen=True, slots=True)
class Headroom:
    """Per-pod predictions and headroom as one profile sees them (LatencyPredictionInfo)."""

    ttft: FloatArray  # NaN: no prediction
    tpot: FloatArray
    has_pred: BoolArray
    ttft_headroom: FloatArray  # 0 where the dimension is neutralised or there is no prediction
    tpot_headroom: FloatArray
    ttft_valid: BoolArray
    tpot_valid: BoolArray
    combined: FloatArray  # ttft_weight * ttft_headroom + tpot_weight * tpot_headroom
    tier_tpot_headroom: FloatArray | None = None
    """TPOT headroom the tier decision uses when it differs from ``tpot_headroom`` (the policy's
    ``tpot_tier_quantile = "p90"``: SLO minus the calibrated p90)."""

    @property
    def valid(self) -> BoolArray:
        return self.has_pred & self.ttft_valid & self.tpot_valid

    @property
    def positive(self) -> BoolArray:
        tpot = self.tpot_headroom if self.tier_tpot_headroom is None else self.tier_tpot_headroom
        return self.has_pred & (self.ttft_headroom >= 0) & (tpot >= 0)


@dataclass(slots=True)
class ProfileState:
    """What a profile's filters narrow, its scorer scores and its picker picks from."""

    profile: str
    features: Features
    headroom: Headroom | None  # None: the predictor gave nothing
    alive: BoolArray
    removed_by: list[str | None]
    rng: random.Random
    scores: FloatArray = field(init=False)
    fallback: bool = False
    steps: list[StepTrace] = field(default_factory=list)
    interference: FloatArray | None = None  # expected SLO misses per pod (interference scorer)

    def __post_init__(self) -> None:
        self.scores = np.full(len(self.features.names), np.nan)

    def alive_idx(self) -> np.ndarray:
        return np.flatnonzero(self.alive)

    def remove(self, idx: np.ndarray, by: str) -> None:
        for i in idx.tolist():
            self.removed_by[i] = by
        self.alive[idx] = False

    def step(self, plugin: str, outcome: str) -> None:
        self.steps.append(StepTrace(self.profile, plugin, outcome, int(self.alive.sum())))

    def predicted(self) -> BoolArray:
        if self.headroom is None:
            return np.zeros(len(self.features.names), dtype=np.bool_)
        return self.headroom.has_pred
