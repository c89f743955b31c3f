"""`POST /v1/schedule`: a request and its candidate pods in, a decision out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from backend.pools.models import DEFAULT_POOL
from backend.samples.schemas import INT32_MAX, Features


class TopologyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str | None = Field(None, max_length=253)
    rack: str | None = Field(None, max_length=253)
    zone: str | None = Field(None, max_length=253)
    region: str | None = Field(None, max_length=253)


class CandidateIn(Features):
    """A candidate pod: the wire features plus who and where it is."""

    name: str = Field(min_length=1, max_length=253)
    role: Literal["", "prefill", "decode"] = Field("", description="llm-d.ai/role label value.")
    topology: TopologyIn | None = None
    dispatched_requests: int | None = Field(
        None, ge=0, le=INT32_MAX, description="Router's in-flight count (idle detection)."
    )
    running_tpot_slos_ms: list[float] = Field(
        default_factory=list, max_length=10_000, description="TPOT SLOs of running requests."
    )
    num_tokens_generated: int = Field(1, ge=0, le=INT32_MAX)


class RequestIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt_tokens: int = Field(ge=0, le=INT32_MAX)
    ttft_slo_ms: float | None = Field(None, gt=0, description="Else the header, else the policy.")
    tpot_slo_ms: float | None = Field(None, gt=0, description="Else the header, else the policy.")
    objective: str | None = Field(None, max_length=63, description="InferenceObjective name.")
    stream: bool = True
    seed: int | None = Field(None, description="Makes the random draws reproducible.")


class ScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = DEFAULT_POOL
    request: RequestIn
    candidates: list[CandidateIn] = Field(min_length=1, max_length=10_000)


class ScheduleOut(BaseModel):
    pool: str
    policy_version: int | None
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    slo_source: dict[str, str] = Field(description="Where each SLO came from.")
    objective: str | None
    priority: int
    decision: dict[str, Any] = Field(
        description="admitted, reason, chosen (or prefill and decode), fallback, and per "
        "candidate the predictions, headroom, tier, score and the filter that removed it."
    )
