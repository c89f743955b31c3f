"""Samples: window coverage per bucket, train/test counts, ingestion rate."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from backend.deps import RuntimeDep, SessionDep
from backend.ui.deps import ConsoleActor, PoolDep, StateDep
from backend.ui.views import samples_view

router = APIRouter()


@router.get("/samples")
def samples_page(
    request: Request,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleActor,
    choice: PoolDep,
) -> Response:
    view = samples_view(session, choice.selected, runtime.window)
    return state.renderer.page(
        request, "samples.html", {"choice": choice, "view": view}, actor=actor, active="samples"
    )
