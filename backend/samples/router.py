from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool

from backend.auth.deps import ActorDep, scope
from backend.db import unit_of_work
from backend.deps import Runtime, RuntimeDep, SessionDep
from backend.pools.models import DEFAULT_POOL
from backend.samples import service
from backend.samples.schemas import IngestResult, SamplesBulk, TrainingEntry, WindowStats
from backend.serving.service import openapi_body, parse_body

router = APIRouter(prefix="/v1/samples", tags=["samples"])

PoolQuery = Query(DEFAULT_POOL, description="Pool the samples belong to.")


def _store(runtime: Runtime, pool: str, entries: list[TrainingEntry]) -> service.Ingested:
    with unit_of_work(runtime.sessions) as session:
        pool_id = runtime.pools.resolve(session, pool)
        window = runtime.settings.window
        return service.ingest(
            session, pool_id, entries, runtime.window, window.test_fraction, runtime.rng
        )


async def ingest_entries(
    runtime: Runtime, pool: str, entries: list[TrainingEntry]
) -> service.Ingested:
    """Store validated entries, committed before the caller answers: acknowledged means
    durable. The database work runs in a worker thread, off the event loop that serves
    predictions."""
    done = await run_in_threadpool(_store, runtime, pool, entries)
    runtime.telemetry.samples.labels(pool, "ttft").inc(done.ttft_rows)
    runtime.telemetry.samples.labels(pool, "tpot").inc(done.tpot_rows)
    return done


@router.post(
    "",
    response_model=IngestResult,
    dependencies=[Depends(scope("ingest"))],
    openapi_extra=openapi_body(SamplesBulk),
)
async def post_samples(
    request: Request, runtime: RuntimeDep, pool: str = PoolQuery
) -> IngestResult:
    """Bulk ingestion of 1..10,000 observed latencies. All or nothing: a bad row stores nothing."""
    # pydantic's own JSON parser validates while parsing: about half the cost of json.loads
    # followed by validation, which matters at tens of thousands of entries per second.
    body = await parse_body(request, SamplesBulk)
    done = await ingest_entries(runtime, pool, body.entries)
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
    return service.window_stats(session, pool, pool_id, runtime.window)
