"""Policy and objective shapes. Defaults equal upstream llm-d's."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from backend.pools.schemas import POOL_NAME_PATTERN


class PolicySpec(BaseModel):
    """Everything a platform team tunes for a pool's routing. Every field has upstream's default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    default_ttft_slo_ms: float | None = Field(
        None, gt=0, description="TTFT SLO for requests without `x-llm-d-slo-ttft-ms`; none: no SLO."
    )
    default_tpot_slo_ms: float | None = Field(
        None, gt=0, description="TPOT SLO for requests without `x-llm-d-slo-tpot-ms`; none: no SLO."
    )
    mode: Literal["routing", "slo"] = Field(
        "slo", description="routing: pick the lowest predicted latency; slo: the SLO-aware chain."
    )
    strategy: Literal["least", "most"] = Field(
        "least", description="least: best fit (smallest headroom that meets the SLO); most: spread."
    )
    ttft_weight: float = Field(
        0.8, ge=0, le=1, description="Weight of TTFT headroom; TPOT gets the rest (0.8 = 80/20)."
    )
    epsilon_explore_neg: float = Field(
        0.01, ge=0, le=1, description="Chance to route into the tier that misses the SLO."
    )
    strict_affinity_threshold: float = Field(
        0.99, ge=0, le=1, description="Prefix score the strict affinity filter requires."
    )
    loose_affinity_threshold: float = Field(
        0.8, ge=0, le=1, description="Prefix score the loose affinity filter requires."
    )
    affinity_exploration_probability: float = Field(
        0.01, ge=0, le=1, description="Chance to skip the affinity gate and consider every pod."
    )
    max_ttft_penalty_ms: float = Field(
        5000.0, ge=0, description="Drop affinity when the best sticky pod is this much slower."
    )
    slo_buffer_factor: float = Field(1.0, gt=0, le=10, description="Multiplier on the TPOT SLO.")
    picker: Literal["weighted_random", "best_fit"] = Field(
        "weighted_random",
        description="weighted_random: upstream's lottery; best_fit: deterministic.",
    )
    streaming_mode: bool = Field(
        True, description="TPOT counts only for streamed requests (upstream's streamingMode)."
    )
    fallback_kv_weight: float = Field(1.0, ge=0, le=1, description="Heuristic fallback: free KV.")
    fallback_queue_weight: float = Field(1.0, ge=0, le=1, description="Heuristic: short queue.")
    fallback_prefix_weight: float = Field(1.0, ge=0, le=1, description="Heuristic: prefix hits.")
    pd_selection: Literal["greedy", "joint"] = Field(
        "greedy", description="P/D: greedy (upstream, D then P) or joint (pair incl. KV transfer)."
    )


class PolicyCreate(PolicySpec):
    pool: str = Field(pattern=POOL_NAME_PATTERN, description="Pool the policy governs (one each).")


class PolicyUpdate(BaseModel):
    """Only the fields given change; the rest keep their current values."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    default_ttft_slo_ms: float | None = Field(None, gt=0)
    default_tpot_slo_ms: float | None = Field(None, gt=0)
    mode: Literal["routing", "slo"] | None = None
    strategy: Literal["least", "most"] | None = None
    ttft_weight: float | None = Field(None, ge=0, le=1)
    epsilon_explore_neg: float | None = Field(None, ge=0, le=1)
    strict_affinity_threshold: float | None = Field(None, ge=0, le=1)
    loose_affinity_threshold: float | None = Field(None, ge=0, le=1)
    affinity_exploration_probability: float | None = Field(None, ge=0, le=1)
    max_ttft_penalty_ms: float | None = Field(None, ge=0)
    slo_buffer_factor: float | None = Field(None, gt=0, le=10)
    picker: Literal["weighted_random", "best_fit"] | None = None
    streaming_mode: bool | None = None
    fallback_kv_weight: float | None = Field(None, ge=0, le=1)
    fallback_queue_weight: float | None = Field(None, ge=0, le=1)
    fallback_prefix_weight: float | None = Field(None, ge=0, le=1)
    pd_selection: Literal["greedy", "joint"] | None = None


class PolicyRead(BaseModel):
    id: int
    pool: str
    version: int
    spec: PolicySpec
    updated_at: datetime
    updated_by: str


class PolicyChange(BaseModel):
    version: int
    action: Literal["create", "update", "restore"]
    changed_at: datetime
    changed_by: str
    changes: dict[str, tuple[Any, Any]] = Field(description="field -> [old, new]")
    spec: PolicySpec = Field(description="The whole policy as of this version.")


class ObjectiveCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = Field(pattern=POOL_NAME_PATTERN)
    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$",
        description="InferenceObjective name, as in the `x-llm-d-inference-objective` header.",
    )
    priority: int = Field(
        0, ge=-(2**31), le=2**31 - 1, description="Higher is more critical; < 0 is sheddable."
    )
    description: str = Field("", max_length=500)


class ObjectiveUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    description: str | None = Field(None, max_length=500)


class ObjectiveRead(BaseModel):
    id: int
    pool: str
    name: str
    priority: int
    sheddable: bool
    description: str
    updated_at: datetime
    updated_by: str
