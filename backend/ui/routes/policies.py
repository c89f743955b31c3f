"""Policies: every field of the spec with its validation message, history with diffs and
restore, and the EPP config download (the very export the API serves)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import RedirectResponse, Response

from backend.advisor import service as advisor
from backend.advisor.workloads import workload_titles
from backend.auth.service import Actor
from backend.deps import RuntimeDep, SessionDep
from backend.exceptions import Conflict, Invalid, NotFound
from backend.policies import service as policies
from backend.policies.models import Policy
from backend.pools.models import Pool
from backend.pools.service import get_pool
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
from backend.ui.forms import (
    base_version_of,
    form_int,
    form_values,
    parse_policy_form,
    policy_groups,
)
from backend.whatif.simulation import DEFAULT_TRACE, trace_choices

router = APIRouter()


def render_policy_page(
    request: Request,
    state: ConsoleState,
    session: Session,
    actor: Actor,
    choice: PoolChoice,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
    conflict: Conflict | None = None,
    base_version: int | None = None,
) -> Response:
    policy = policies.policy_for_pool(session, choice.selected.id)
    spec = policies.spec_of(policy)
    history = list(policies.history(session, policy)) if policy is not None else []
    # The advice's default workload: the pool's own replay when it has the traffic for one.
    default_workload, no_replay = advisor.default_workload(
        session, state.settings, choice.selected.id, datetime.now(UTC)
    )
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
            # The Advisor panel: its workloads and this pool's recent advice.
            "workloads": workload_titles(),
            "default_workload": default_workload,
            "no_replay": no_replay,
            "advice": state.advisor.recent(choice.selected.name) if state.advisor else [],
            "trace": DEFAULT_TRACE,
            # A save refused because someone else saved first: their changes, to compare.
            "conflict": conflict,
            "changed_since": (
                policies.changes_since(session, policy, base_version)
                if conflict is not None and policy is not None and base_version is not None
                else []
            ),
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
    target = get_pool(session, pool)
    parsed = parse_policy_form(form)
    base_version = base_version_of(form)

    def again(status_code: int, **problem: Any) -> Response:
        # The form as submitted, with what was wrong: nothing the user typed is lost.
        return render_policy_page(
            request,
            state,
            session,
            actor,
            choose_pool(session, pool),
            values=parsed.values,
            status_code=status_code,
            **problem,
        )

    if parsed.spec is None:
        return again(422, errors=parsed.errors)
    try:
        policy, changed = policies.save_pool_policy(
            session, runtime.policy_cache, target.id, parsed.spec, actor, base_version
        )
    except Conflict as exc:
        # Someone saved first: shown with their change, to compare before saving again.
        return again(409, conflict=exc, base_version=base_version)
    request.session["flash"] = (
        f"Saved: policy version {policy.version}."
        if changed
        else "Nothing changed: the policy is as it was."
    )
    return _back(request, pool)


def _policy(session: Session, pool: Pool) -> Policy:
    policy = policies.policy_for_pool(session, pool.id)
    if policy is None:
        raise NotFound(f"pool {pool.name!r} has no policy yet")
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
    policy = _policy(session, get_pool(session, pool))
    version = form_int(form, "version")
    if version is None:
        raise Invalid("version: choose a version to restore", field="version")
    policy = policies.restore_policy(
        session, runtime.policy_cache, policy.id, version, actor, base_version_of(form)
    )
    request.session["flash"] = f"Restored version {version} as version {policy.version}."
    return _back(request, pool)


@router.get("/policies/{pool}/epp-config")
def download_epp_config(pool: str, session: SessionDep, actor: ConsoleActor) -> Response:
    policy = _policy(session, get_pool(session, pool))
    filename, body = policies.epp_config_export(session, policy.id)
    return Response(
        body,
        media_type="application/yaml",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
