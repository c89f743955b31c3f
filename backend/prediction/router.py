from __future__ import annotations

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from backend.auth.deps import scope
from backend.deps import RuntimeDep
from backend.pools.models import DEFAULT_POOL
from backend.prediction.schemas import (
    BulkPredictionRequest,
    BulkPredictResponse,
    ModelRef,
    Prediction,
    PredictionRequest,
    PredictResponse,
)
from backend.prediction.service import ensure_known_async, openapi_body, parse_body, predict_rows
from backend.predictor.serving import ModelsNotReady, Predictions, ServedModel

router = APIRouter(prefix="/v1", tags=["predict"], dependencies=[Depends(scope("predict"))])

PoolQuery = Query(DEFAULT_POOL, description="Pool whose models answer.")


def _ref(served: ServedModel | None) -> ModelRef | None:
    if served is None:
        return None
    return ModelRef(
        version_id=served.version_id,
        kind=served.kind,
        objective=served.objective,
        quantile=served.quantile,
        activated_at=served.activated_at,
    )


async def _predict(runtime: RuntimeDep, pool: str, rows: list[PredictionRequest]) -> Predictions:
    try:
        return predict_rows(runtime.store, pool, rows)
    except ModelsNotReady:
        await ensure_known_async(runtime, pool)
        raise HTTPException(
            503, f"no TTFT model is active for pool {pool!r} yet (see GET /v1/models)"
        ) from None


@router.post("/predict", response_model=PredictResponse)
async def predict(
    row: PredictionRequest, runtime: RuntimeDep, pool: str = PoolQuery
) -> PredictResponse:
    """Predicted TTFT and TPOT (ms) for one request on one pod."""
    p = await _predict(runtime, pool, [row])
    ttft_ref = _ref(p.ttft)
    assert ttft_ref is not None
    return PredictResponse(
        pool=pool,
        ttft_ms=float(p.ttft_ms[0]),
        tpot_ms=float(p.tpot_ms[0]),
        tpot_p90_ms=None if p.tpot_p90_ms is None else float(p.tpot_p90_ms[0]),
        ttft_p90_ms=None if p.ttft_p90_ms is None else float(p.ttft_p90_ms[0]),
        ttft_model=ttft_ref,
        tpot_model=_ref(p.tpot),
    )


@router.post(
    "/predict/bulk",
    response_model=BulkPredictResponse,
    openapi_extra=openapi_body(BulkPredictionRequest),
)
async def predict_bulk(
    request: Request, runtime: RuntimeDep, pool: str = PoolQuery
) -> BulkPredictResponse:
    """Many rows at once, answers in the same order; all or nothing (a bad row is a 422)."""
    body = await parse_body(request, BulkPredictionRequest)
    p = await _predict(runtime, pool, body.requests)
    ttft_ref = _ref(p.ttft)
    assert ttft_ref is not None
    none: list[float | None] = [None] * len(p.ttft_ms)
    p90 = p.tpot_p90_ms.tolist() if p.tpot_p90_ms is not None else none
    ttft_p90 = p.ttft_p90_ms.tolist() if p.ttft_p90_ms is not None else none
    return BulkPredictResponse(
        pool=pool,
        predictions=[
            Prediction(ttft_ms=t, tpot_ms=d, tpot_p90_ms=q, ttft_p90_ms=tq)
            for t, d, q, tq in zip(
                p.ttft_ms.tolist(), p.tpot_ms.tolist(), p90, ttft_p90, strict=True
            )
        ],
        ttft_model=ttft_ref,
        tpot_model=_ref(p.tpot),
    )
