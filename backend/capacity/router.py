from __future__ import annotations

from fastapi import APIRouter, Depends

from backend.auth.deps import scope
from backend.capacity.schemas import SaturationRead
from backend.deps import RuntimeDep

router = APIRouter(prefix="/v1/pools", tags=["capacity"], dependencies=[Depends(scope("predict"))])


@router.get("/{pool}/saturation", response_model=SaturationRead)
async def get_saturation(pool: str, runtime: RuntimeDep) -> SaturationRead:
    """The pool's saturation as of the last tick (at most `HEADROOM_CAPACITY__INTERVAL_S` old):
    the share of its recent requests that would miss an SLO if routed now, per pod beside it,
    and the SLO headroom at the median and p90 request. Served from memory."""
    await runtime.pool_id(pool)  # 404 for a pool that does not exist
    capacity = runtime.capacity
    return SaturationRead.of(pool, capacity.report(pool), capacity.desired(pool))
