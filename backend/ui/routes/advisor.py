"""The Advisor panel of the Policies page: start advice, follow it, apply a candidate; and the
upstream preset. Every write goes through the same services as the API's."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from backend.advisor import service as advisor
from backend.deps import RuntimeDep, SessionDep
from backend.exceptions import Invalid, NotFound
from backend.policies import service as policies
from backend.pools.service import get_pool
from backend.ui.deps import ConsoleActor, ConsoleEditor, FormDep, StateDep, choose_pool, see_other
from backend.ui.forms import base_version_of, form_int

router = APIRouter()


def _chart(result: dict[str, Any]) -> dict[str, Any]:
    """Held-out SLO attainment per ranked candidate (mean, min and max over the seeds), in the
    what-if page's bar-chart format (frontend/static/console.js draws both)."""
    rows = result["ranking"]
    figures = [row["held_out"]["slo_attainment"] for row in rows]
    return {
        "labels": [f"#{i} {row['label'][:48]}" for i, row in enumerate(rows, start=1)],
        "y": "SLO attainment on held-out parts (%)",
        "series": [
            {"label": name, "values": [round(100 * (f[name] or 0.0), 1) for f in figures]}
            for name in ("min", "mean", "max")
        ],
    }


@router.post("/policies/{pool}/advice/start")
def start_advice(
    pool: str,
    request: Request,
    form: FormDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    target = get_pool(session, pool)
    job = advisor.start_advice(
        session,
        runtime.advisor,
        runtime.settings,
        target.id,
        pool,
        str(form["workload"]) if form.get("workload") else None,
        actor,
    )
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/policies/{pool}/advice/{job.id}", status_code=303)


@router.get("/policies/{pool}/advice/{job_id}")
def advice_page(
    pool: str,
    job_id: str,
    request: Request,
    state: StateDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleActor,
) -> Response:
    job = advisor.get_advice(runtime.advisor, pool, job_id)
    choice = choose_pool(session, pool)
    policy = policies.policy_for_pool(session, choice.selected.id)
    return state.renderer.page(
        request,
        "advice_job.html",
        {
            "choice": choice,
            "job": job,
            "current_version": policy.version if policy is not None else None,
            "chart": _chart(job.result) if job.result else None,
        },
        actor=actor,
        active="policies",
    )


@router.post("/policies/{pool}/advice/{job_id}/apply")
def apply_advice(
    pool: str,
    job_id: str,
    request: Request,
    form: FormDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    target = get_pool(session, pool)
    # The page numbers candidates from 1, as it shows them.
    number = form_int(form, "candidate")
    if number is None:
        raise Invalid("candidate: choose a candidate to apply", field="candidate")
    policy = advisor.apply_advice(
        session, runtime.policy_cache, runtime.advisor, target.id, pool, job_id, number - 1, actor
    )
    request.session["flash"] = f"Applied candidate #{number}: policy version {policy.version}."
    return see_other(request, f"/policies?pool={pool}")


@router.post("/policies/{pool}/preset/{preset}")
def apply_preset(
    pool: str,
    preset: str,
    request: Request,
    form: FormDep,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: ConsoleEditor,
) -> Response:
    policy = policies.policy_for_pool(session, get_pool(session, pool).id)
    if policy is None:
        raise NotFound(
            f"pool {pool!r} has no policy yet: save the form to create one, then apply the preset"
        )
    policy = policies.apply_preset(
        session, runtime.policy_cache, policy.id, preset, actor, base_version_of(form)
    )
    request.session["flash"] = f"Preset {preset} applied: policy version {policy.version}."
    return see_other(request, f"/policies?pool={pool}")
