"""What-if: simulate an edited policy against the active one, then save it or not."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request
from starlette.responses import RedirectResponse, Response

from backend.deps import SessionDep
from backend.exceptions import Invalid, NotFound
from backend.policies import service as policies
from backend.policies.schemas import PolicySpec
from backend.ui.deps import ConsoleActor, ConsoleEditor, FormDep, PoolDep, StateDep, choose_pool
from backend.ui.forms import form_values, parse_policy_form, policy_groups
from backend.ui.routes.policies import render_policy_page
from backend.whatif.runner import WhatIfRunner
from backend.whatif.simulation import DEFAULT_TRACE, trace_choices

router = APIRouter()


def _runner(state: StateDep) -> WhatIfRunner:
    if state.whatif is None:  # pragma: no cover - set at start-up
        raise HTTPException(503, "the what-if runner is not started")
    return state.whatif


@router.get("/whatif")
def whatif_page(
    request: Request, state: StateDep, session: SessionDep, actor: ConsoleActor, choice: PoolDep
) -> Response:
    policy = policies.policy_for_pool(session, choice.selected.id)
    return state.renderer.page(
        request,
        "whatif.html",
        {
            "choice": choice,
            "policy": policy,
            "groups": policy_groups(),
            "values": form_values(policies.spec_of(policy)),
            "errors": {},
            "traces": trace_choices(),
            "trace": DEFAULT_TRACE,
            "jobs": _runner(state).recent(choice.selected.name),
        },
        actor=actor,
        active="whatif",
    )


@router.post("/whatif/{pool}/start")
def start(
    pool: str,
    request: Request,
    form: FormDep,
    state: StateDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    choice = choose_pool(session, pool)
    trace = str(form.get("trace", DEFAULT_TRACE))
    if trace not in trace_choices():
        raise Invalid(f"trace: one of {', '.join(trace_choices())}", field="trace")
    parsed = parse_policy_form(form)
    if parsed.spec is None:
        # Shown where the edit was made, with each message next to its field.
        return render_policy_page(
            request,
            state,
            session,
            actor,
            choice,
            values=parsed.values,
            errors=parsed.errors,
            status_code=422,
        )
    policy = policies.policy_for_pool(session, choice.selected.id)
    job = _runner(state).start(
        pool=pool,
        trace=trace,
        requested_by=actor.name,
        candidate=parsed.spec.model_dump(mode="json"),
        baseline=policies.spec_of(policy).model_dump(mode="json"),
        baseline_version=policy.version if policy is not None else None,
        requests=state.settings.ui.whatif_requests,
    )
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/whatif/jobs/{job.id}", status_code=303)


@router.get("/whatif/jobs/{job_id}")
def job_page(
    job_id: str, request: Request, state: StateDep, session: SessionDep, actor: ConsoleActor
) -> Response:
    job = _runner(state).get(job_id)
    if job is None:
        raise NotFound("no such what-if run (records are kept for a day)")
    choice = choose_pool(session, job.pool)
    policy = policies.policy_for_pool(session, choice.selected.id)
    changes = {
        k: (job.baseline.get(k), v) for k, v in job.candidate.items() if job.baseline.get(k) != v
    }
    return state.renderer.page(
        request,
        "whatif_job.html",
        {
            "choice": choice,
            "job": job,
            "changes": changes,
            "current_version": policy.version if policy is not None else None,
            "candidate_values": form_values(PolicySpec.model_validate(job.candidate)),
        },
        actor=actor,
        active="whatif",
    )
