from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request

from backend.deps import RuntimeDep
from backend.routing.schemas import ScheduleIn, ScheduleOut
from backend.routing.service import BadHeader, decide, resolve

router = APIRouter(prefix="/v1", tags=["schedule"])


@router.post("/schedule", response_model=ScheduleOut)
def schedule_request(body: ScheduleIn, request: Request, runtime: RuntimeDep) -> ScheduleOut:
    """Run the pool's policy on one request and its candidate pods, and explain the decision.

    SLOs come from the body, else the `x-llm-d-slo-ttft-ms` / `x-llm-d-slo-tpot-ms` headers,
    else the policy's defaults; priority from the objective (body or
    `x-llm-d-inference-objective`). Without a model the heuristic fallback decides
    (`decision.fallback`): a request is never dropped because the predictor is unavailable.
    """
    with runtime.sessions() as session:
        pool_id = runtime.pools.resolve(session, body.pool)
    pool = runtime.policy_cache.get(pool_id)
    headers = {k.lower(): v for k, v in request.headers.items()}
    try:
        resolved = resolve(body.request, headers, pool)
    except BadHeader as exc:
        raise HTTPException(422, str(exc)) from None
    names = [c.name for c in body.candidates]
    if len(set(names)) != len(names):
        raise HTTPException(422, "candidates: pod names must be unique")
    decision = decide(runtime.store, body.pool, body.candidates, resolved, pool.policy)
    return ScheduleOut(
        pool=body.pool,
        policy_version=pool.version,
        ttft_slo_ms=resolved.request.ttft_slo_ms,
        tpot_slo_ms=resolved.request.tpot_slo_ms,
        slo_source=resolved.slo_source,
        objective=resolved.objective,
        priority=resolved.request.priority,
        decision=decision.to_dict(),
    )
