"""Samples: window coverage per bucket, train/test counts, ingestion rate; flush the window."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from backend.db import unit_of_work
from backend.deps import RuntimeDep, SessionDep
from backend.samples import repository, service
from backend.ui.deps import ConsoleActor, ConsoleEditor, FormDep, PoolDep, StateDep, see_other
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
    flushes = repository.flushes(session, choice.selected.id, limit=10)
    return state.renderer.page(
        request,
        "samples.html",
        {"choice": choice, "view": view, "flushes": flushes},
        actor=actor,
        active="samples",
    )


@router.post("/samples/flush")
def flush_samples(
    request: Request, runtime: RuntimeDep, actor: ConsoleEditor, choice: PoolDep, form: FormDep
) -> Response:
    """Empty the pool's window, with the reason recorded (editors only; the page asks first)."""
    pool = choice.selected
    reason = str(form.get("reason", "")).strip()[:500]
    if not reason:
        request.session["flash"] = "Say why the window is flushed: nothing was removed."
        return see_other(request, f"/samples?pool={pool.name}")
    with unit_of_work(runtime.sessions) as session:
        done = service.flush_window(session, pool.id, actor.name, reason)
    removed = sum(done.removed.values())
    request.session["flash"] = f"Flushed {removed} samples from pool {pool.name}."
    return see_other(request, f"/samples?pool={pool.name}")
