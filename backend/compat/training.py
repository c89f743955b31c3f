"""The upstream training server's ingestion route, at the root and under /pools/{pool}/."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request, Response, status
from fastapi.responses import JSONResponse
from sqlalchemy.orm import Session

from backend.auth.deps import current_actor, editor, metrics_reader, scope
from backend.auth.service import Actor
from backend.db import unit_of_work
from backend.deps import PoolPath, Runtime, RuntimeDep, SessionDep
from backend.errors import RATE_LIMITED
from backend.pools.models import DEFAULT_POOL
from backend.prediction.service import openapi_body
from backend.registry import service as registry
from backend.samples import repository, service
from backend.samples.models import TargetCode
from backend.samples.router import ingest_request
from backend.samples.schemas import (
    UpstreamFlushRequest,
    UpstreamFlushResponse,
    UpstreamTrainingBulk,
)
from backend.telemetry import CONTENT_TYPE, UpstreamCollector, render_upstream

router = APIRouter(tags=["upstream training server"])
# The EPP sends no credentials: open where the network is trusted (see AuthSettings).
INGEST = scope("ingest", upstream=True)


def _accepted(n: int) -> JSONResponse:
    # The Go client treats anything but 202 as failure and drops the batch.
    return JSONResponse(
        status_code=status.HTTP_202_ACCEPTED,
        content={"message": f"Accepted {n} training samples."},
    )


@router.post(
    "/add_training_data_bulk",
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[Depends(INGEST)],
    openapi_extra=openapi_body(UpstreamTrainingBulk),
    responses=RATE_LIMITED,
)
async def add_training_data_bulk(request: Request, runtime: RuntimeDep) -> JSONResponse:
    """Upstream-compatible bulk ingestion into the `default` pool."""
    done = await ingest_request(request, runtime, DEFAULT_POOL, "upstream")
    return _accepted(done.accepted)


@router.post(
    "/pools/{pool}/add_training_data_bulk",
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[Depends(INGEST)],
    openapi_extra=openapi_body(UpstreamTrainingBulk),
    responses=RATE_LIMITED,
)
async def add_training_data_bulk_pool(
    pool: PoolPath, request: Request, runtime: RuntimeDep
) -> JSONResponse:
    """Upstream-compatible bulk ingestion into any pool."""
    done = await ingest_request(request, runtime, pool, "upstream")
    return _accepted(done.accepted)


def _upstream_metrics(runtime: Runtime, session: SessionDep, pool: str) -> bytes:
    pool_id = runtime.pools.resolve(session, pool)
    collector = UpstreamCollector(pool, runtime.store, runtime.sessions, runtime.window, pool_id)
    return render_upstream(collector)


# The same trust as the upstream routes: the series name pools, versions and errors.
METRICS = [Depends(metrics_reader)]


@router.get("/metrics", response_class=Response, dependencies=METRICS)
def metrics(runtime: RuntimeDep, session: SessionDep) -> Response:
    """Prometheus text: Headroom's own series plus upstream's for the `default` pool."""
    body = runtime.telemetry.render() + _upstream_metrics(runtime, session, DEFAULT_POOL)
    return Response(body, media_type=CONTENT_TYPE)


@router.get("/pools/{pool}/metrics", response_class=Response, dependencies=METRICS)
def pool_metrics(pool: PoolPath, runtime: RuntimeDep, session: SessionDep) -> Response:
    """Upstream's training-server series for one pool."""
    return Response(_upstream_metrics(runtime, session, pool), media_type=CONTENT_TYPE)


async def may_flush(request: Request, runtime: RuntimeDep) -> Actor:
    """Who may empty a window through upstream's token-less route: whoever may reach the other
    upstream routes, unless `auth.trust_upstream_flush` is off (then an editor's token)."""
    auth = runtime.settings.auth
    if auth.required and not auth.trust_upstream_flush:
        return await editor(await current_actor(request, runtime))
    return await scope("admin", upstream=True)(request, runtime)


FlushBody = Annotated[UpstreamFlushRequest | None, Body()]


def _flush(
    runtime: Runtime, pool: str, body: UpstreamFlushRequest | None, who: str
) -> UpstreamFlushResponse:
    body = body or UpstreamFlushRequest()
    reason = body.reason or "upstream POST /flush"
    with unit_of_work(runtime.sessions) as session:
        pool_id = runtime.pools.resolve(session, pool)
        done = service.flush_window(
            session,
            pool_id,
            who,
            reason,
            training=body.flush_training_data,
            test=body.flush_test_data,
        )
    removed = done.removed
    total = sum(removed.values())
    return UpstreamFlushResponse(
        success=True,
        flushed_at=datetime.now(UTC).isoformat(),
        reason=body.reason,
        ttft_training_samples_flushed=removed[(TargetCode.TTFT, False)],
        tpot_training_samples_flushed=removed[(TargetCode.TPOT, False)],
        ttft_test_samples_flushed=removed[(TargetCode.TTFT, True)],
        tpot_test_samples_flushed=removed[(TargetCode.TPOT, True)],
        # Headroom keeps no running score history to clear: held-out metrics belong to the
        # stored model versions, which a flush leaves alone (as it leaves the active models).
        metrics_cleared=body.flush_metrics,
        message=f"Successfully flushed {total} samples from pool {pool}.",
    )


def _who(actor: Actor, request: Request) -> str:
    client = request.client.host if request.client else "unknown"
    return f"{actor.name} (POST /flush from {client})"


@router.post("/flush", response_model=UpstreamFlushResponse)
def flush(
    request: Request,
    runtime: RuntimeDep,
    actor: Annotated[Actor, Depends(may_flush)],
    body: FlushBody = None,
) -> UpstreamFlushResponse:
    """Upstream-compatible: empty the `default` pool's window (audited; see /v1/samples/flushes)."""
    return _flush(runtime, DEFAULT_POOL, body, _who(actor, request))


@router.post("/pools/{pool}/flush", response_model=UpstreamFlushResponse)
def flush_pool(
    pool: str,
    request: Request,
    runtime: RuntimeDep,
    actor: Annotated[Actor, Depends(may_flush)],
    body: FlushBody = None,
) -> UpstreamFlushResponse:
    """Upstream-compatible: empty one pool's window."""
    return _flush(runtime, pool, body, _who(actor, request))


def data_status(session: Session, runtime: Runtime, pool: str) -> dict[str, Any]:
    """Upstream's `/data/status` fields, from the pool's window and registry."""
    pool_id = runtime.pools.resolve(session, pool)
    spec = runtime.window
    sets = {False: dict.fromkeys(TargetCode, 0), True: dict.fromkeys(TargetCode, 0)}
    queued = {(t, q): 0 for t in TargetCode for q in (False, True)}
    buckets: dict[str, int] = {}
    for (code, bucket, is_test), n in repository.bucket_counts(session, pool_id).items():
        target = TargetCode(code)
        sets[is_test][target] += n
        kv, prefix, band = spec.split(bucket)
        queued[(target, band > 0)] += n
        key = f"queue_{band}_cache_{kv}_prefix_{prefix}"
        buckets[key] = buckets.get(key, 0) + n
    versions = registry.version_counts(session, pool_id)
    trained = [at for _, at in versions.values() if at is not None]

    def counts(is_test: bool) -> dict[str, int]:
        ttft, tpot = sets[is_test][TargetCode.TTFT], sets[is_test][TargetCode.TPOT]
        return {"ttft_samples": ttft, "tpot_samples": tpot, "total_samples": ttft + tpot}

    return {
        "training_data": counts(False),
        "test_data": counts(True),
        # Headroom has no noqueue/queued ensemble: one model per target sees every queue band.
        "ensemble": {
            "ensemble_mode": False,
            "ensemble_active": False,
            "min_samples_for_split": 0,
            **{
                f"{t.label}_{'queued' if q else 'noqueue'}_samples": n
                for (t, q), n in queued.items()
            },
        },
        "metrics": {f"{t.label}_scores_count": n for t, (n, _) in versions.items()},
        "bucket_distribution": dict(sorted(buckets.items())),
        "model_ready": registry.active_version(session, pool_id, TargetCode.TTFT) is not None,
        "last_retrain": max(trained).isoformat() if trained else None,
    }


@router.get("/data/status", dependencies=[Depends(INGEST)])
def get_data_status(runtime: RuntimeDep, session: SessionDep) -> dict[str, Any]:
    """Upstream-compatible: the `default` pool's window and training state."""
    return data_status(session, runtime, DEFAULT_POOL)


@router.get("/pools/{pool}/data/status", dependencies=[Depends(INGEST)])
def get_pool_data_status(pool: str, runtime: RuntimeDep, session: SessionDep) -> dict[str, Any]:
    """Upstream-compatible: one pool's window and training state."""
    return data_status(session, runtime, pool)
