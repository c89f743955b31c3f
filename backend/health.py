"""Liveness, readiness and upstream's root document, at the root (the `default` pool) and
under `/pools/{pool}`, so that an EPP pointed at either URL finds them.

Readiness of a pool's prediction routes means "they can answer the EPP usefully": the
database answers and its schema is migrated, and either a model is loaded for the pool or the
fallback is configured (`serving.ready_without_model`, on by default: the EPP's
latency-aware scorer answers with its composite heuristic while the predictor says 503, so a
pool with no model yet still routes; that is also how upstream behaves, whose cold start
serves a default model at once). Turn it off to keep a replica out of its Service until it
has loaded a model.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from backend.deps import PoolPath, Runtime, RuntimeDep
from backend.pools.models import DEFAULT_POOL

router = APIRouter(tags=["health"])

NOT_READY = "Models are not ready"  # upstream's prediction server's words
CONSOLE_HOME = "/ui/"


def _database_error(runtime: Runtime) -> str | None:
    try:
        with runtime.engine.connect() as conn:
            conn.execute(text("SELECT 1 FROM pools LIMIT 1"))
    except Exception as exc:  # any failure means "do not route traffic here"
        return f"database not ready: {type(exc).__name__}"
    return None


def _model_info(runtime: Runtime, pool: str) -> dict[str, Any]:
    served = runtime.store.get(pool, "ttft")
    training = runtime.settings.training
    return {
        "model_type": "xgboost",
        "objective_type": served.objective if served else training.objective,
        "quantile": served.quantile if served else training.quantile,
        "model_loaded": served is not None,
    }


async def _readiness(runtime: Runtime, pool: str) -> JSONResponse:
    await runtime.pool_id(pool)  # 404 for a pool that does not exist
    problem = await run_in_threadpool(_database_error, runtime)
    if problem is not None:
        return JSONResponse(status_code=503, content={"detail": problem})
    info = _model_info(runtime, pool)
    if not info["model_loaded"] and not runtime.settings.serving.ready_without_model:
        return JSONResponse(status_code=503, content={"detail": NOT_READY})
    return JSONResponse({"status": "ready", **info})


def _root(request: Request, runtime: Runtime, pool: str) -> Response:
    # A person's browser asks for HTML and gets the console; clients (upstream's suite, curl,
    # the EPP's tooling) get upstream's JSON document.
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse(CONSOLE_HOME, status_code=307)
    info = _model_info(runtime, pool)
    return JSONResponse(
        {
            "message": f"Headroom latency predictor (pool {pool})",
            "model_type": info["model_type"],
            "objective_type": info["objective_type"],
            "quantile": info["quantile"],
            "is_ready": info["model_loaded"],
            "sync_interval": runtime.settings.serving.poll_interval_s,
            "training_server": "(this service)",
        }
    )


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers. Upstream's exact body."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Readiness of the `default` pool's routes (see the module's docstring)."""
    return await _readiness(runtime, DEFAULT_POOL)


@router.get("/", include_in_schema=False)
async def root(request: Request, runtime: RuntimeDep) -> Response:
    return _root(request, runtime, DEFAULT_POOL)


@router.get("/pools/{pool}/healthz")
async def pool_healthz(pool: PoolPath, runtime: RuntimeDep) -> dict[str, str]:
    await runtime.pool_id(pool)
    return {"status": "ok"}


@router.get("/pools/{pool}/readyz")
async def pool_readyz(pool: PoolPath, runtime: RuntimeDep) -> JSONResponse:
    return await _readiness(runtime, pool)


@router.get("/pools/{pool}/", include_in_schema=False)
async def pool_root(pool: PoolPath, request: Request, runtime: RuntimeDep) -> Response:
    await runtime.pool_id(pool)
    return _root(request, runtime, pool)
