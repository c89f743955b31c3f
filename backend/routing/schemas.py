"""`POST /v1/schedule`: a request and its candidate pods in, a decision out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from backend.policies.schemas import MAX_SLO_MS
from backend.pools.models import DEFAULT_POOL
from backend.pools.schemas import POOL_NAME_PATTERN
from backend.predictor.features import normalise_role
from backend.samples.schemas import INT32_MAX, Features, NameText

MAX_CANDIDATES = 10_000
MAX_RUNNING_SLOS = 250_000
"""All candidates' `running_tpot_slos_ms` together: 1,000 pods with 250 running requests each.
The per-list cap alone let 1,600 x 10,000 values through, which grew the process by 1.1 GB."""
MAX_BODY_VALUES = 1_000_000
"""Commas a `/v1/schedule` body may hold, counted before it is parsed: an upper bound on the
values the parser would allocate (a full 10,000-candidate body uses about 200,000)."""


# What the scheduler needs of an llm-d role: which phases the pod can take.
_SCHEDULING_ROLES: dict[str, Literal["", "prefill", "decode"]] = {
    "": "",
    "prefill": "prefill",
    "decode": "decode",
    "prefill-decode": "",
    "both": "",
    "encode-prefill": "prefill",
    "encode-prefill-decode": "",
}


def _scheduling_role(value: Any) -> Any:
    if not isinstance(value, str):
        return value  # the Literal refuses it with pydantic's own message
    role = _SCHEDULING_ROLES.get(normalise_role(value))
    if role is None:
        known = ", ".join(repr(r) for r in _SCHEDULING_ROLES)
        raise ValueError(f"must be a role that can serve a request: one of {known}")
    return role


Role = Annotated[Literal["", "prefill", "decode"], BeforeValidator(_scheduling_role)]


class TopologyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: NameText | None = None
    rack: NameText | None = None
    zone: NameText | None = None
    region: NameText | None = None


class CandidateIn(Features):
    """A candidate pod: the wire features plus who and where it is."""

    name: NameText = Field(min_length=1)
    role: Role = Field(
        "",
        description="llm-d.ai/role label value: prefill-decode, both and encode-prefill-decode "
        'serve both phases (as ""), encode-prefill the prefill phase; an encode-only pod '
        "cannot take a request.",
    )
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
    ttft_slo_ms: float | None = Field(
        None, gt=0, le=MAX_SLO_MS, description="Else the header, else the policy."
    )
    tpot_slo_ms: float | None = Field(
        None, gt=0, le=MAX_SLO_MS, description="Else the header, else the policy."
    )
    objective: NameText | None = Field(None, max_length=63, description="InferenceObjective name.")
    stream: bool = True
    seed: int | None = Field(None, description="Makes the random draws reproducible.")


class ScheduleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = Field(DEFAULT_POOL, pattern=POOL_NAME_PATTERN)
    request: RequestIn
    candidates: list[CandidateIn] = Field(min_length=1, max_length=MAX_CANDIDATES)

    @model_validator(mode="after")
    def _within_budget(self) -> ScheduleIn:
        total = sum(len(c.running_tpot_slos_ms) for c in self.candidates)
        if total > MAX_RUNNING_SLOS:
            raise ValueError(
                f"candidates: {total} running_tpot_slos_ms in all, above the budget of "
                f"{MAX_RUNNING_SLOS} for one call"
            )
        return self


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
