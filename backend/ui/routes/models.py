"""Models: versions with their metrics, error over time, the held-out scatter, roll back."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from backend.deps import IdPath, RuntimeDep, SessionDep
from backend.registry import service as registry
from backend.samples.models import TargetCode
from backend.ui.deps import ConsoleActor, ConsoleEditor, PoolDep, StateDep
from backend.ui.views import models_view

router = APIRouter()


@router.get("/models")
def models_page(
    request: Request,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleActor,
    choice: PoolDep,
    target: Literal["ttft", "tpot"] = Query("ttft"),
) -> Response:
    view = models_view(
        session,
        runtime.store,
        choice.selected,
        TargetCode.from_label(target),
        knowable=state.knowable,
    )
    return state.renderer.page(
        request,
        "models.html",
        {"choice": choice, "view": view, "target": target},
        actor=actor,
        active="models",
    )


@router.post("/models/{version_id}/activate")
def activate(
    request: Request,
    version_id: IdPath,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    """Serve this version (roll back or forward); every replica swaps within about a second."""
    version = registry.activate_version(session, runtime.notifier, version_id, actor.name)
    target = TargetCode(version.target)
    pool = registry.pool_names(session)[version.pool_id]
    request.session["flash"] = (
        f"Version {version.id} is now the active {target.label.upper()} model."
    )
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/models?pool={pool}&target={target.label}", status_code=303)
