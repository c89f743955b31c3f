"""The advisor's JSON API: start a search for a pool, follow it, apply a candidate."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, status
from pydantic import BaseModel, ConfigDict, Field

from backend.advisor import service
from backend.advisor.workloads import workload_names
from backend.auth.deps import ActorDep, EditorDep
from backend.deps import PoolPath, RuntimeDep, SessionDep
from backend.policies.router import read_policy
from backend.policies.schemas import PolicyRead
from backend.registry.service import pool_names

router = APIRouter(tags=["advisor"])
# Job ids are uuid4 hex: anything else is a 422, never a store lookup.
JobPath = Path(pattern=r"^[0-9a-f]{32}$", description="Advice job id.")


class AdviceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str | None = Field(
        None,
        max_length=64,
        description="What to search on: the pool's own traffic replayed from its recent samples "
        "(`pool-replay`; 422 naming why when the pool has too little traffic or no SLO), or a "
        "shipped trace (`mooncake`, `azure-code`). Default: `pool-replay` when the pool can be "
        "replayed, else `mooncake`.",
    )


class AdviceRead(BaseModel):
    id: str
    pool: str
    workload: str
    requested_by: str
    status: str
    progress: float
    message: str
    base_version: int | None = Field(description="The policy version the advice compares with.")
    budget: dict[str, Any]
    created_at: str
    result: dict[str, Any] | None = Field(
        description="When done: the workload, the ranking (held-out SLO attainment mean and "
        "min-max over seeds, against the active policy) and each candidate's EPP config."
    )


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidate: int = Field(ge=0, le=1000, description="Index in the result's ranking.")


def _read(job: Any) -> AdviceRead:
    return AdviceRead(
        id=job.id,
        pool=job.pool,
        workload=job.trace,
        requested_by=job.requested_by,
        status=job.status,
        progress=job.progress,
        message=job.message,
        base_version=job.baseline_version,
        budget=job.candidate.get("budget", {}),
        created_at=job.created_at,
        result=job.result,
    )


@router.get("/v1/advice/workloads", response_model=list[str])
def list_workloads(_: ActorDep) -> list[str]:
    """The workloads an advice can run on."""
    return list(workload_names())


@router.post(
    "/v1/pools/{pool}/advice", response_model=AdviceRead, status_code=status.HTTP_202_ACCEPTED
)
def start_advice(
    pool: PoolPath,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
    body: AdviceRequest | None = None,
) -> AdviceRead:
    """Search the configs an unchanged llm-d EPP can express (and, labelled, Headroom-only
    ones) on a workload; follow it at `GET /v1/pools/{pool}/advice/{id}`."""
    pool_id = runtime.pools.resolve(session, pool)
    job = service.start_advice(
        session,
        runtime.advisor,
        runtime.settings,
        pool_id,
        pool,
        (body or AdviceRequest()).workload,
        actor,
    )
    return _read(job)


@router.get("/v1/pools/{pool}/advice/{job_id}", response_model=AdviceRead)
def get_advice(
    pool: PoolPath, runtime: RuntimeDep, _: ActorDep, job_id: str = JobPath
) -> AdviceRead:
    return _read(service.get_advice(runtime.advisor, pool, job_id))


@router.post("/v1/pools/{pool}/advice/{job_id}/apply", response_model=PolicyRead)
def apply_advice(
    pool: PoolPath,
    body: ApplyRequest,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
    job_id: str = JobPath,
) -> PolicyRead:
    """Save a ranked candidate as the pool's policy (a new audited version; the EPP config
    export follows). 409 if the policy changed since the advice started."""
    pool_id = runtime.pools.resolve(session, pool)
    policy = service.apply_advice(
        session,
        runtime.policy_cache,
        runtime.advisor,
        pool_id,
        pool,
        job_id,
        body.candidate,
        actor,
    )
    return read_policy(policy, pool_names(session))
