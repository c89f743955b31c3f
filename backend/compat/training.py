"""The upstream training server's ingestion route, at the root and under /pools/{pool}/."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.responses import JSONResponse

from backend.auth.deps import metrics_reader, scope
from backend.deps import PoolPath, Runtime, RuntimeDep, SessionDep
from backend.pools.models import DEFAULT_POOL
from backend.prediction.service import openapi_body
from backend.samples.router import ingest_request
from backend.samples.schemas import UpstreamTrainingBulk
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
