from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Depends, Response

from backend.auth.deps import scope
from backend.capacity.models import DesiredReplicas
from backend.capacity.schemas import SaturationRead
from backend.capacity.service import PoolReport
from backend.deps import RuntimeDep

router = APIRouter(prefix="/v1/pools", tags=["capacity"], dependencies=[Depends(scope("predict"))])


@dataclass(frozen=True)
class _Rendered:
    report: PoolReport | None
    desired: DesiredReplicas | None
    body: bytes


# The last body rendered per pool. A report is read many times per tick (every scrape, the
# gateway's saturation detector): validating and serialising 100 pods' levels each time cost
# more than the rest of the request. An entry holds the very objects it was rendered from and
# serves only while the monitor serves those same objects (identity, not equality), so a new
# tick or desired-replicas read renders anew (apps sharing this process share an entry only
# before their first tick, when every body is the same).
_rendered: dict[str, _Rendered] = {}


@router.get("/{pool}/saturation", response_model=SaturationRead)
async def get_saturation(pool: str, runtime: RuntimeDep) -> Response:
    """The pool's saturation as of the last tick (at most `HEADROOM_CAPACITY__INTERVAL_S` old):
    the share of its recent requests that would miss an SLO if routed now, per pod beside it,
    and the SLO headroom at the median and p90 request. Served from memory."""
    await runtime.pool_id(pool)  # 404 for a pool that does not exist
    capacity = runtime.capacity
    report, desired = capacity.report(pool), capacity.desired(pool)
    cached = _rendered.get(pool)
    if cached is None or cached.report is not report or cached.desired is not desired:
        body = SaturationRead.of(pool, report, desired).model_dump_json().encode()
        cached = _rendered[pool] = _Rendered(report, desired, body)
    return Response(cached.body, media_type="application/json")
