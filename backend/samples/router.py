from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import ActorDep, EditorDep, scope
from backend.db import unit_of_work
from backend.deps import Runtime, RuntimeDep, SessionDep
from backend.errors import RATE_LIMITED, validate_body
from backend.pools.models import DEFAULT_POOL
from backend.prediction.service import openapi_body
from backend.registry import service as registry
from backend.samples import repository, service
from backend.samples.models import TargetCode, WindowFlush
from backend.samples.offload import BODIES, BodyKind
from backend.samples.schemas import (
    IngestResult,
    SamplesBulk,
    TrainingEntry,
    WindowFlushRead,
    WindowFlushRequest,
    WindowStats,
)

router = APIRouter(prefix="/v1/samples", tags=["samples"])

PoolQuery = Query(DEFAULT_POOL, description="Pool the samples belong to.")


def _write(runtime: Runtime, rows: list[service.Row]) -> None:
    with unit_of_work(runtime.sessions) as session:
        service.write_rows(session, rows)


async def ingest_request(
    request: Request, runtime: Runtime, pool: str, kind: BodyKind
) -> service.Ingested:
    """Validate and store a request's batch, committed before the caller answers:
    acknowledged means durable. Raises what the route answers: 422, 404, 429 or 503."""
    raw = await request.body()
    client = request.client.host if request.client is not None else "unknown"
    wait = await runtime.ingest_limiter.admit(client, len(raw))
    if wait is not None:
        raise HTTPException(
            429,
            f"ingestion from {client} is over its rate limit; retry in {wait:.0f} s",
            headers={"Retry-After": f"{wait:.0f}"},
        )
    if runtime.ingest_pool is not None:
        done = await runtime.ingest_pool.store(raw, kind, pool)
    else:
        body = validate_body(BODIES[kind], raw, json=True)
        done = await _ingest_here(runtime, pool, body.entries)
    runtime.telemetry.samples.labels(pool, "ttft").inc(done.ttft_rows)
    runtime.telemetry.samples.labels(pool, "tpot").inc(done.tpot_rows)
    return done


async def _ingest_here(
    runtime: Runtime, pool: str, entries: list[TrainingEntry]
) -> service.Ingested:
    """In the API process (embedded mode, or `ingest.processes = 0`).

    The CPU work (rows and their window buckets) runs here on the event loop, after a yield
    that lets waiting predictions go first; only the database write goes to a worker thread.
    A worker thread doing CPU work would hold the GIL that the loop needs back after each of
    its socket calls, and every prediction would then wait for the switch interval several
    times over.
    """
    pool_id = await runtime.pool_id(pool)
    await asyncio.sleep(0)
    window = runtime.settings.window
    rows, done = service.build_rows(
        pool_id, entries, runtime.window, window.test_fraction, runtime.rng
    )
    await run_in_threadpool(_write, runtime, rows)
    return done


@router.post(
    "",
    response_model=IngestResult,
    dependencies=[Depends(scope("ingest"))],
    openapi_extra=openapi_body(SamplesBulk),
    responses=RATE_LIMITED,
)
async def post_samples(
    request: Request, runtime: RuntimeDep, pool: str = PoolQuery
) -> IngestResult:
    """Bulk ingestion of 1..10,000 observed latencies. All or nothing: a bad row stores nothing."""
    done = await ingest_request(request, runtime, pool, "samples")
    return IngestResult(
        pool=pool,
        accepted=done.accepted,
        ttft_samples=done.ttft_rows,
        tpot_samples=done.tpot_rows,
        unlabelled=done.unlabelled,
    )


@router.get("/stats", response_model=WindowStats)
def get_stats(
    runtime: RuntimeDep, session: SessionDep, _: ActorDep, pool: str = PoolQuery
) -> WindowStats:
    """Samples stored per bucket and the train/test totals of each target's window."""
    pool_id = runtime.pools.resolve(session, pool)
    stats = service.window_stats(session, pool, pool_id, runtime.window)
    for target in TargetCode:
        latest = registry.latest_version(session, pool_id, target)
        if latest is not None:
            counted = stats.targets[target.label]
            counted.outliers, counted.shift_since = latest.n_outliers, latest.shift_since
    return stats


def _flush_read(record: WindowFlush, pool: str) -> WindowFlushRead:
    names = [name for name in WindowFlushRead.model_fields if name != "pool"]
    return WindowFlushRead(pool=pool, **{name: getattr(record, name) for name in names})


@router.post("/flush", response_model=WindowFlushRead)
def flush_window(
    body: WindowFlushRequest,
    runtime: RuntimeDep,
    actor: EditorDep,
    pool: str = PoolQuery,
) -> WindowFlushRead:
    """Empty a pool's window (or only rows observed before `older_than`), e.g. after a vLLM
    upgrade or a new GPU type. The active models keep serving until new samples train a
    successor. Recorded with who, when, why and how many rows went."""
    with unit_of_work(runtime.sessions) as session:
        pool_id = runtime.pools.resolve(session, pool)
        done = service.flush_window(
            session, pool_id, actor.name, body.reason, older_than=body.older_than
        )
        record = session.get(WindowFlush, done.record_id)
        assert record is not None
        return _flush_read(record, pool)


@router.get("/flushes", response_model=list[WindowFlushRead])
def list_flushes(
    runtime: RuntimeDep,
    session: SessionDep,
    _: ActorDep,
    pool: str = PoolQuery,
    limit: int = Query(20, ge=1, le=1000),
) -> list[WindowFlushRead]:
    """The audit trail of a pool's window flushes (console, /v1 and upstream /flush), newest
    first."""
    pool_id = runtime.pools.resolve(session, pool)
    return [_flush_read(r, pool) for r in repository.flushes(session, pool_id, limit)]
