"""Objectives: InferenceObjective names and priorities; below zero is sheddable."""

from __future__ import annotations

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import RedirectResponse, Response

from backend.auth.service import Actor
from backend.deps import IdPath, RuntimeDep, SessionDep
from backend.exceptions import Conflict
from backend.policies import service as policies
from backend.policies.models import Objective
from backend.registry.service import pool_names
from backend.ui.deps import (
    ConsoleActor,
    ConsoleEditor,
    ConsoleState,
    FormDep,
    PoolChoice,
    PoolDep,
    StateDep,
    choose_pool,
    see_other,
)
from backend.ui.forms import parse_objective_create, parse_objective_update

router = APIRouter()


def _render(
    request: Request,
    state: ConsoleState,
    session: Session,
    actor: Actor,
    choice: PoolChoice,
    form: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return state.renderer.page(
        request,
        "objectives.html",
        {
            "choice": choice,
            "objectives": policies.list_objectives(session, choice.selected.id),
            "form": form or {"name": "", "priority": "0", "description": ""},
            "errors": errors or {},
        },
        actor=actor,
        active="objectives",
        status_code=status_code,
    )


@router.get("/objectives")
def objectives_page(
    request: Request, state: StateDep, session: SessionDep, actor: ConsoleActor, choice: PoolDep
) -> Response:
    return _render(request, state, session, actor, choice)


def _back(request: Request, pool: str) -> RedirectResponse:
    return see_other(request, f"/objectives?pool={pool}")


@router.post("/objectives/{pool}/create")
def create_objective(
    pool: str,
    request: Request,
    form: FormDep,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    choice = choose_pool(session, pool)
    data, errors = parse_objective_create(pool, form)
    submitted = {k: str(form.get(k, "")) for k in ("name", "priority", "description")}
    if data is not None:
        try:
            objective = policies.add_objective(
                session, runtime.policy_cache, choice.selected.id, data, actor
            )
        except Conflict as exc:
            errors = {"name": exc.detail}
        else:
            request.session["flash"] = f"Objective {objective.name} created."
            return _back(request, pool)
    return _render(request, state, session, actor, choice, submitted, errors, status_code=422)


def _objective(session: Session, objective_id: int) -> tuple[Objective, str]:
    objective = policies.get_objective(session, objective_id)
    return objective, pool_names(session)[objective.pool_id]


@router.post("/objectives/{objective_id}/update")
def update_objective(
    objective_id: IdPath,
    request: Request,
    form: FormDep,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    objective, pool = _objective(session, objective_id)
    data, errors = parse_objective_update(form)
    if data is None:
        choice = choose_pool(session, pool)
        errors = {f"{objective.id}.{k}": v for k, v in errors.items()}
        return _render(request, state, session, actor, choice, None, errors, status_code=422)
    try:
        policies.update_objective(session, runtime.policy_cache, objective.id, data, actor)
    except Conflict as exc:
        # Someone changed it since this page was loaded: say how it reads now.
        choice = choose_pool(session, pool)
        errors = {objective.name: exc.detail}
        return _render(request, state, session, actor, choice, None, errors, status_code=409)
    request.session["flash"] = f"Objective {objective.name} updated."
    return _back(request, pool)


@router.post("/objectives/{objective_id}/delete")
def delete_objective(
    objective_id: IdPath,
    request: Request,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    _, pool = _objective(session, objective_id)
    objective = policies.delete_objective(session, runtime.policy_cache, objective_id)
    request.session["flash"] = f"Objective {objective.name} deleted (by {actor.name})."
    return _back(request, pool)
