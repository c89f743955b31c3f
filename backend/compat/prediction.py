"""The upstream prediction server's API (and the training server's model endpoints).

Mounted twice: at the root for the `default` pool and under `/pools/{pool}` for every pool,
so an llm-d EPP works unchanged with `PREDICTION_SERVER_URL` / `TRAINING_SERVER_URL` pointed
here. Field names, status codes and timestamp formats follow upstream exactly; timestamps are
RFC 3339 with a timezone because the Go client cannot decode anything else.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from fastapi import APIRouter, Depends, Request, Response

from backend.auth.deps import scope
from backend.deps import PoolPath, Runtime, RuntimeDep
from backend.pools.models import DEFAULT_POOL
from backend.prediction.schemas import BulkPredictionRequest, PredictionRequest
from backend.prediction.service import (
    ensure_known,
    ensure_known_async,
    openapi_body,
    parse_body,
    predict_rows,
)
from backend.predictor.serving import ModelsNotReady, Predictions, ServedModel

# Upstream's Go client branches on model_type; "xgboost" makes it fetch (and only cache) the
# tree dumps. Ours are XGBoost trees too (on a physics base for the hybrid kind).
WIRE_MODEL_TYPE = "xgboost"
NOT_READY = "Models not ready"
TARGETS: tuple[Literal["ttft", "tpot"], ...] = ("ttft", "tpot")


def _json(content: Any, status_code: int = 200) -> Response:
    return Response(orjson.dumps(content), status_code=status_code, media_type="application/json")


def _iso(ts: datetime | None) -> str | None:
    return ts.isoformat() if ts is not None else None


def _objective(runtime: Runtime, served: ServedModel | None) -> tuple[str, float]:
    if served is not None:
        return served.objective, served.quantile
    t = runtime.settings.training
    return t.objective, t.quantile


def _meta(runtime: Runtime, pool: str) -> dict[str, Any]:
    ttft = runtime.store.get(pool, "ttft")
    tpot = runtime.store.get(pool, "tpot")
    objective, quantile = _objective(runtime, ttft)
    loads = [m.loaded_at for m in (ttft, tpot) if m is not None]
    return {
        "is_ready": ttft is not None,
        "model_type": WIRE_MODEL_TYPE,
        "objective_type": objective,
        "quantile": quantile,
        "last_model_load": _iso(max(loads)) if loads else None,
        "models_exist": {"ttft_model": ttft is not None, "tpot_model": tpot is not None},
    }


def _rows(p: Predictions, meta: dict[str, Any]) -> list[dict[str, Any]]:
    now = datetime.now(UTC).isoformat()
    common = {
        "predicted_at": now,
        "model_type": WIRE_MODEL_TYPE,
        "objective_type": meta["objective_type"],
        "quantile": meta["quantile"],
        "last_model_load": meta["last_model_load"],
    }
    return [
        {"ttft_ms": t, "tpot_ms": d, **common}
        for t, d in zip(p.ttft_ms.tolist(), p.tpot_ms.tolist(), strict=True)
    ]


def make_router(pool_dep: Callable[..., Awaitable[str]], prefix: str) -> APIRouter:
    """The whole upstream surface for one way of naming the pool (root or /pools/{pool})."""
    # A default value rather than an Annotated alias: this module's annotations are strings,
    # and FastAPI resolves them in module scope, where a local alias does not exist.
    pool_param = Depends(pool_dep)
    router = APIRouter(
        prefix=prefix,
        tags=["upstream prediction server"],
        dependencies=[Depends(scope("predict", upstream=True))],
    )

    @router.post("/predict/bulk/strict", openapi_extra=openapi_body(BulkPredictionRequest))
    async def predict_bulk_strict(
        request: Request, runtime: RuntimeDep, pool: str = pool_param
    ) -> Response:
        """All rows or none, in order: 422 on any bad row, 503 while no model is active."""
        started = time.perf_counter()
        body = await parse_body(request, BulkPredictionRequest)
        try:
            p = predict_rows(runtime.store, pool, body.requests)
        except ModelsNotReady:
            await ensure_known_async(runtime, pool)
            return _json({"detail": NOT_READY}, 503)
        n = len(body.requests)
        runtime.telemetry.predicted_rows.labels(pool, "strict").inc(n)
        runtime.telemetry.predict_seconds.labels("strict").observe(time.perf_counter() - started)
        return _json(
            {
                "predictions": _rows(p, _meta(runtime, pool)),
                "total_requests": n,
                "successful_predictions": n,
                "failed_predictions": 0,
                "processing_time_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        )

    @router.post("/predict/bulk", openapi_extra=openapi_body(BulkPredictionRequest))
    async def predict_bulk(
        request: Request, runtime: RuntimeDep, pool: str = pool_param
    ) -> Response:
        """Upstream's lenient bulk: the body is validated whole (422 naming the first bad row,
        as upstream answers); a failure to predict (no model yet) is a 200 with every row in
        `errors` and null predictions, where strict answers 503."""
        started = time.perf_counter()
        body = await parse_body(request, BulkPredictionRequest)
        rows = body.requests
        n = len(rows)
        try:
            p = predict_rows(runtime.store, pool, rows)
        except ModelsNotReady:
            await ensure_known_async(runtime, pool)
            predictions: list[dict[str, Any] | None] = [None] * n
            errors = [
                {"index": i, "error": NOT_READY, "request": row.model_dump()}
                for i, row in enumerate(rows)
            ]
        else:
            predictions = list(_rows(p, _meta(runtime, pool)))
            errors = []
        ok = n - len(errors)
        return _json(
            {
                "predictions": predictions,
                "errors": errors,
                "total_requests": n,
                "successful_predictions": ok,
                "failed_predictions": n - ok,
                "processing_time_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        )

    @router.post("/predict")
    async def predict(
        row: PredictionRequest, runtime: RuntimeDep, pool: str = pool_param
    ) -> Response:
        """One row (upstream zero-fills tokens-in-flight here; we use them, as strict does)."""
        try:
            p = predict_rows(runtime.store, pool, [row])
        except ModelsNotReady:
            await ensure_known_async(runtime, pool)
            return _json({"detail": NOT_READY}, 503)
        return _json(_rows(p, _meta(runtime, pool))[0])

    @router.get("/status")
    def status(runtime: RuntimeDep, pool: str = pool_param) -> Response:
        ensure_known(runtime, pool)
        return _json(
            {
                **_meta(runtime, pool),
                "training_server_url": "(this service)",
                "ensemble_active": False,
            }
        )

    @router.post("/reload")
    def reload(runtime: RuntimeDep, pool: str = pool_param) -> Response:
        """Load newly activated models now instead of waiting for the notification or poll."""
        ensure_known(runtime, pool)
        changed = runtime.sync()
        meta = _meta(runtime, pool)
        return _json(
            {
                "synced": True,
                "loaded": changed > 0,
                "is_ready": meta["is_ready"],
                "model_type": meta["model_type"],
                "objective_type": meta["objective_type"],
                "quantile": meta["quantile"],
                "last_load_time": meta["last_model_load"],
            }
        )

    @router.get("/model/download/info")
    def download_info(runtime: RuntimeDep, pool: str = pool_param) -> Response:
        ensure_known(runtime, pool)
        meta = _meta(runtime, pool)
        base = "" if pool_dep is default_pool else f"/pools/{pool}"
        evaluation = {}
        for target in TARGETS:
            served = runtime.store.get(pool, target)
            if served is not None:
                evaluation[f"{target}_version"] = served.version_id
        return _json(
            {
                "model_type": WIRE_MODEL_TYPE,
                "quantile": meta["quantile"],
                "available_endpoints": {
                    "trees": {
                        "ttft_trees": f"{base}/model/ttft/xgb/json",
                        "tpot_trees": f"{base}/model/tpot/xgb/json",
                    }
                },
                "model_status": {
                    "ttft_model_ready": meta["models_exist"]["ttft_model"],
                    "tpot_model_ready": meta["models_exist"]["tpot_model"],
                },
                "evaluation_info": evaluation,
            }
        )

    @router.get("/model/{target}/xgb/json")
    def tree_dump(
        target: Literal["ttft", "tpot"], runtime: RuntimeDep, pool: str = pool_param
    ) -> Response:
        """The served model's trees (`get_dump(dump_format="json")`); `[]` while there is none,
        so the EPP's 60 s refresh does not log an error during warm-up."""
        ensure_known(runtime, pool)
        served = runtime.store.get(pool, target)
        return _json(served.model.tree_dump() if served is not None else [])

    return router


async def default_pool() -> str:
    return DEFAULT_POOL


async def path_pool(pool: PoolPath) -> str:
    return pool


root_router = make_router(default_pool, "")
pool_router = make_router(path_pool, "/pools/{pool}")
