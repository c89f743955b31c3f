"""Overview: per pool, the active models, their error and freshness, saturation and warnings."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from backend.deps import RuntimeDep, SessionDep
from backend.pools.service import list_pools
from backend.ui.deps import ConsoleActor, StateDep
from backend.ui.views import overview

router = APIRouter()


@router.get("/")
def overview_page(
    request: Request,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleActor,
) -> Response:
    pools = overview(session, list_pools(session), state.settings, runtime.capacity)
    return state.renderer.page(
        request, "overview.html", {"pools": pools}, actor=actor, active="overview"
    )
