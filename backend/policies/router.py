from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, HTTPException, Query, Response, status
from pydantic import BaseModel, Field, ValidationError

from backend.auth.deps import ActorDep, EditorDep
from backend.deps import IdPath, RuntimeDep, SessionDep
from backend.errors import as_request_error, validate_body
from backend.policies import service
from backend.policies.mapping import to_scheduling
from backend.policies.models import Objective, Policy
from backend.policies.schemas import (
    ObjectiveCreate,
    ObjectiveRead,
    ObjectiveUpdate,
    PolicyChange,
    PolicyCreate,
    PolicyRead,
    PolicySpec,
    PolicyUpdate,
)
from backend.prediction.service import openapi_body
from backend.registry.service import pool_names
from backend.scheduling.epp_config import epp_config_yaml, headroom_only

router = APIRouter(tags=["policies"])


def _read(policy: Policy, names: dict[int, str]) -> PolicyRead:
    return PolicyRead(
        id=policy.id,
        pool=names[policy.pool_id],
        version=policy.version,
        spec=PolicySpec.model_validate(policy.spec),
        updated_at=policy.updated_at,
        updated_by=policy.updated_by,
    )


def _policy(session: SessionDep, policy_id: int) -> Policy:
    try:
        return service.get_policy(session, policy_id)
    except service.NotFound as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/v1/policies", response_model=list[PolicyRead])
def list_policies(session: SessionDep, _: ActorDep) -> list[PolicyRead]:
    """Every pool's policy."""
    names = pool_names(session)
    return [_read(p, names) for p in service.list_policies(session)]


@router.post("/v1/policies", response_model=PolicyRead, status_code=status.HTTP_201_CREATED)
def create_policy(
    body: PolicyCreate, runtime: RuntimeDep, session: SessionDep, actor: EditorDep
) -> PolicyRead:
    """Give a pool its policy; fields left out take upstream's defaults."""
    pool_id = runtime.pools.resolve(session, body.pool)
    spec = PolicySpec.model_validate(body.model_dump(exclude={"pool"}))
    try:
        policy = service.create_policy(session, pool_id, spec, actor.name)
    except service.Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    session.commit()
    runtime.policy_cache.invalidate()
    return _read(policy, pool_names(session))


@router.get("/v1/policies/{policy_id}", response_model=PolicyRead)
def get_policy(policy_id: IdPath, session: SessionDep, _: ActorDep) -> PolicyRead:
    return _read(_policy(session, policy_id), pool_names(session))


@router.put(
    "/v1/policies/{policy_id}",
    response_model=PolicyRead,
    openapi_extra=openapi_body(PolicyUpdate),
)
def update_policy(
    policy_id: IdPath,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
    body: dict[str, Any] = Body(),
) -> PolicyRead:
    """Change the fields given (the rest stay); a change makes a new version in the history.

    Send `null` for an SLO default to remove it.
    """
    fields = validate_body(PolicyUpdate, body).model_dump(exclude_unset=True)
    policy = _policy(session, policy_id)
    try:
        service.update_policy(session, policy, fields, actor)
    except ValidationError as exc:  # e.g. null for a field that must have a value
        raise as_request_error(exc) from None
    session.commit()
    runtime.policy_cache.invalidate()
    return _read(policy, pool_names(session))


@router.get("/v1/policies/{policy_id}/history", response_model=list[PolicyChange])
def policy_history(policy_id: IdPath, session: SessionDep, _: ActorDep) -> list[PolicyChange]:
    """Every version, newest first: who, when, and each changed field's old and new value."""
    policy = _policy(session, policy_id)
    return [
        PolicyChange(
            version=v.version,
            action=v.action,
            changed_at=v.changed_at,
            changed_by=v.changed_by,
            changes={k: (old, new) for k, (old, new) in v.changes.items()},
            spec=PolicySpec.model_validate(v.spec),
        )
        for v in service.history(session, policy)
    ]


class RestoreRequest(BaseModel):
    version: int = Field(ge=1, description="The version to make current again.")


@router.post("/v1/policies/{policy_id}/restore", response_model=PolicyRead)
def restore_policy(
    policy_id: IdPath,
    body: RestoreRequest,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
) -> PolicyRead:
    """Make an earlier version current again; recorded as a new version."""
    policy = _policy(session, policy_id)
    try:
        service.restore(session, policy, body.version, actor)
    except service.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    session.commit()
    runtime.policy_cache.invalidate()
    return _read(policy, pool_names(session))


def _objective_read(o: Objective, names: dict[int, str]) -> ObjectiveRead:
    return ObjectiveRead(
        id=o.id,
        pool=names[o.pool_id],
        name=o.name,
        priority=o.priority,
        sheddable=o.priority < 0,
        description=o.description,
        updated_at=o.updated_at,
        updated_by=o.updated_by,
    )


@router.get("/v1/objectives", response_model=list[ObjectiveRead], tags=["objectives"])
def list_objectives(
    runtime: RuntimeDep, session: SessionDep, _: ActorDep, pool: str | None = Query(None)
) -> list[ObjectiveRead]:
    """InferenceObjectives, most critical first."""
    pool_id = runtime.pools.resolve(session, pool) if pool else None
    names = pool_names(session)
    return [_objective_read(o, names) for o in service.list_objectives(session, pool_id)]


@router.post(
    "/v1/objectives",
    response_model=ObjectiveRead,
    status_code=status.HTTP_201_CREATED,
    tags=["objectives"],
)
def create_objective(
    body: ObjectiveCreate, runtime: RuntimeDep, session: SessionDep, actor: EditorDep
) -> ObjectiveRead:
    pool_id = runtime.pools.resolve(session, body.pool)
    try:
        objective = service.create_objective(session, pool_id, body, actor)
    except service.Conflict as exc:
        raise HTTPException(409, str(exc)) from None
    session.commit()
    runtime.policy_cache.invalidate()
    return _objective_read(objective, pool_names(session))


def _objective(session: SessionDep, objective_id: int) -> Objective:
    try:
        return service.get_objective(session, objective_id)
    except service.NotFound as exc:
        raise HTTPException(404, str(exc)) from None


@router.get("/v1/objectives/{objective_id}", response_model=ObjectiveRead, tags=["objectives"])
def get_objective(objective_id: IdPath, session: SessionDep, _: ActorDep) -> ObjectiveRead:
    return _objective_read(_objective(session, objective_id), pool_names(session))


@router.put("/v1/objectives/{objective_id}", response_model=ObjectiveRead, tags=["objectives"])
def update_objective(
    objective_id: IdPath,
    body: ObjectiveUpdate,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
) -> ObjectiveRead:
    objective = service.update_objective(session, _objective(session, objective_id), body, actor)
    session.commit()
    runtime.policy_cache.invalidate()
    return _objective_read(objective, pool_names(session))


@router.delete("/v1/objectives/{objective_id}", status_code=204, tags=["objectives"])
def delete_objective(
    objective_id: IdPath, runtime: RuntimeDep, session: SessionDep, _: EditorDep
) -> Response:
    session.delete(_objective(session, objective_id))
    session.commit()
    runtime.policy_cache.invalidate()
    return Response(status_code=204)


@router.get("/v1/policies/{policy_id}/epp-config", response_class=Response)
def epp_config(policy_id: IdPath, session: SessionDep, _: ActorDep) -> Response:
    """The llm-d router's EndpointPickerConfig (YAML) for this policy, ready to apply."""
    policy = _policy(session, policy_id)
    scheduling = to_scheduling(PolicySpec.model_validate(policy.spec))
    pool = pool_names(session)[policy.pool_id]
    extras = headroom_only(scheduling)
    lines = [
        f"# EndpointPickerConfig for pool {pool!r}, policy version {policy.version}.",
        f"# Exported by Headroom; last changed by {policy.updated_by} at "
        f"{policy.updated_at.isoformat()}.",
        "# Options only Headroom's /v1/schedule applies (no upstream plugin implements them):",
        *(f"#   {key}: {value}" for key, value in extras.items()),
    ]
    body = "\n".join(lines) + "\n" + epp_config_yaml(scheduling)
    filename = f"epp-config-{pool}-v{policy.version}.yaml"
    return Response(
        body,
        media_type="application/yaml",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
