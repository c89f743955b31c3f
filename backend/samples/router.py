from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from backend.auth.deps import ActorDep, scope
from backend.deps import Runtime, RuntimeDep, SessionDep
from backend.pools.models import DEFAULT_POOL
from backend.samples import service
from backend.samples.schemas import IngestResult, SamplesBulk, TrainingEntry, WindowStats

router = APIRouter(prefix="/v1/samples", tags=["samples"])

PoolQuery = Query(DEFAULT_POOL, description="Pool the samples belong to.")


def ingest_entries(
    runtime: Runtime, session: SessionDep, pool: str, entries: list[TrainingEntry]
) -> service.Ingested:
    """Validate-then-store, committed before the caller answers: acknowledged means durable."""
    pool_id = runtime.pools.resolve(session, pool)
    window = runtime.settings.window
    done = service.ingest(
        session, pool_id, entries, runtime.window, window.test_fraction, runtime.rng
    )
    session.commit()
    runtime.telemetry.samples.labels(pool, "ttft").inc(done.ttft_rows)
    runtime.telemetry.samples.labels(pool, "tpot").inc(done.tpot_rows)
    return done


@router.post("", response_model=IngestResult, dependencies=[Depends(scope("ingest"))])
def post_samples(
    body: SamplesBulk, runtime: RuntimeDep, session: SessionDep, pool: str = PoolQuery
) -> IngestResult:
    """Bulk ingestion of 1..10,000 observed latencies. All or nothing: a bad row stores nothing."""
    done = ingest_entries(runtime, session, pool, body.entries)
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
