"""Policies: every field of the spec with its validation message, history with diffs and
restore, and the EPP config download (the very export the API serves)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from sqlalchemy.orm import Session
from starlette.responses import RedirectResponse, Response

from backend.auth.service import Actor
from backend.deps import RuntimeDep, SessionDep
from backend.policies import router as policies_api
from backend.policies import service as policies
from backend.policies.models import Policy
from backend.pools.models import Pool
from backend.pools.service import PoolNotFound, get_pool
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
from backend.ui.forms import form_values, parse_policy_form, policy_groups
from backend.whatif.simulation import DEFAULT_TRACE, trace_choices

router = APIRouter()


def _pool(session: Session, name: str) -> Pool:
    try:
        return get_pool(session, name)
    except PoolNotFound as exc:
        raise HTTPException(404, str(exc)) from None


def render_policy_page(
    request: Request,
    state: ConsoleState,
    session: Session,
    actor: Actor,
    choice: PoolChoice,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    policy = policies.policy_for_pool(session, choice.selected.id)
    spec = policies.spec_of(policy)
    history = list(policies.history(session, policy)) if policy is not None else []
    return state.renderer.page(
        request,
        "policies.html",
        {
            "choice": choice,
            "policy": policy,
            "groups": policy_groups(),
            "values": values if values is not None else form_values(spec),
            "errors": errors or {},
            "history": history,
            "traces": trace_choices(),
            "trace": DEFAULT_TRACE,
        },
        actor=actor,
        active="policies",
        status_code=status_code,
    )


@router.get("/policies")
def policies_page(
    request: Request, state: StateDep, session: SessionDep, actor: ConsoleActor, choice: PoolDep
) -> Response:
    return render_policy_page(request, state, session, actor, choice)


def _back(request: Request, pool: str) -> RedirectResponse:
    return see_other(request, f"/policies?pool={pool}")


@router.post("/policies/{pool}/save")
def save_policy(
    pool: str,
    request: Request,
    form: FormDep,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    target = _pool(session, pool)
    parsed = parse_policy_form(form)
    if parsed.spec is None:
        return render_policy_page(
            request,
            state,
            session,
            actor,
            choose_pool(session, pool),
            values=parsed.values,
            errors=parsed.errors,
            status_code=422,
        )
    policy = policies.policy_for_pool(session, target.id)
    before = policy.version if policy is not None else 0
    if policy is None:
        policy = policies.create_policy(session, target.id, parsed.spec, actor.name)
    else:
        policies.update_policy(session, policy, parsed.spec.model_dump(mode="json"), actor)
    session.commit()
    runtime.policy_cache.invalidate()
    request.session["flash"] = (
        f"Saved: policy version {policy.version}."
        if policy.version != before
        else "Nothing changed: the policy is as it was."
    )
    return _back(request, pool)


def _policy(session: Session, pool: Pool) -> Policy:
    policy = policies.policy_for_pool(session, pool.id)
    if policy is None:
        raise HTTPException(404, f"pool {pool.name!r} has no policy yet")
    return policy


@router.post("/policies/{pool}/restore")
def restore_policy(
    pool: str,
    request: Request,
    form: FormDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    policy = _policy(session, _pool(session, pool))
    raw = form.get("version")
    if not isinstance(raw, str) or not raw.isdigit():
        raise HTTPException(422, "version: choose a version to restore")
    try:
        policies.restore(session, policy, int(raw), actor)
    except policies.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    session.commit()
    runtime.policy_cache.invalidate()
    request.session["flash"] = f"Restored version {raw} as version {policy.version}."
    return _back(request, pool)


@router.get("/policies/{pool}/epp-config")
def download_epp_config(pool: str, session: SessionDep, actor: ConsoleActor) -> Response:
    policy = _policy(session, _pool(session, pool))
    return policies_api.epp_config(policy.id, session, actor)
