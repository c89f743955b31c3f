from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Depends, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import scope
from backend.deps import Runtime, RuntimeDep
from backend.errors import validate_body
from backend.exceptions import Invalid
from backend.prediction.service import openapi_body
from backend.routing.schemas import MAX_BODY_VALUES, ScheduleIn, ScheduleOut
from backend.routing.service import PoolPolicy, decide, resolve

router = APIRouter(prefix="/v1", tags=["schedule"], dependencies=[Depends(scope("predict"))])


async def _pool_policy(runtime: Runtime, pool: str) -> PoolPolicy:
    """From memory on the hot path; the database only on a cache miss, off the event loop."""
    pool_id = await runtime.pool_id(pool)
    cached = runtime.policy_cache.fresh(pool_id)
    if cached is not None:
        return cached
    return await run_in_threadpool(runtime.policy_cache.get, pool_id)


@router.post(
    "/schedule",
    response_model=ScheduleOut,
    openapi_extra=openapi_body(ScheduleIn),
)
async def schedule_request(request: Request, runtime: RuntimeDep) -> Response:
    """Run the pool's policy on one request and its candidate pods, and explain the decision.

    SLOs come from the body, else the `x-llm-d-slo-ttft-ms` / `x-llm-d-slo-tpot-ms` headers,
    else the policy's defaults; priority from the objective (body or
    `x-llm-d-inference-objective`). Without a model the heuristic fallback decides
    (`decision.fallback`): a request is never dropped because the predictor is unavailable.
    """
    raw = await request.body()
    # Counted before parsing: the parser would allocate every value first (see MAX_BODY_VALUES).
    if raw.count(b",") > MAX_BODY_VALUES:
        raise HTTPException(413, f"body holds more than {MAX_BODY_VALUES} values")
    body = validate_body(ScheduleIn, raw, json=True)
    pool = await _pool_policy(runtime, body.pool)
    headers = {k.lower(): v for k, v in request.headers.items()}
    resolved = resolve(body.request, headers, pool)  # BadHeader: 422
    names = [c.name for c in body.candidates]
    if len(set(names)) != len(names):
        raise Invalid("candidates: pod names must be unique", field="candidates")
    decision = decide(
        runtime.store,
        body.pool,
        body.candidates,
        resolved,
        pool.policy,
        runtime.decided(body.pool),
        time.monotonic(),
    )
    out = {
        "pool": body.pool,
        "policy_version": pool.version,
        "ttft_slo_ms": resolved.request.ttft_slo_ms,
        "tpot_slo_ms": resolved.request.tpot_slo_ms,
        "slo_source": resolved.slo_source,
        "objective": resolved.objective,
        "priority": resolved.request.priority,
        "decision": decision.to_dict(),
    }
    # Built and serialised directly: the decision is already plain JSON data, and validating
    # it again against ScheduleOut would cost more than the decision itself.
    return Response(orjson.dumps(out), media_type="application/json")
