from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Query, Response, status
from fastapi import Path as PathParam
from pydantic import BaseModel, Field, ValidationError

from backend.auth.deps import ActorDep, EditorDep
from backend.deps import IdPath, RuntimeDep, SessionDep
from backend.errors import as_request_error, validate_body
from backend.policies import service
from backend.policies.models import Objective, Policy
from backend.policies.schemas import (
    BASE_VERSION,
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

router = APIRouter(tags=["policies"])


def read_policy(policy: Policy, names: dict[int, str]) -> PolicyRead:
    return PolicyRead(
        id=policy.id,
        pool=names[policy.pool_id],
        version=policy.version,
        spec=PolicySpec.model_validate(policy.spec),
        updated_at=policy.updated_at,
        updated_by=policy.updated_by,
    )


@router.get("/v1/policies", response_model=list[PolicyRead])
def list_policies(session: SessionDep, _: ActorDep) -> list[PolicyRead]:
    """Every pool's policy."""
    names = pool_names(session)
    return [read_policy(p, names) for p in service.list_policies(session)]


@router.post("/v1/policies", response_model=PolicyRead, status_code=status.HTTP_201_CREATED)
def create_policy(
    body: PolicyCreate, runtime: RuntimeDep, session: SessionDep, actor: EditorDep
) -> PolicyRead:
    """Give a pool its policy; fields left out take a new pool's defaults: upstream's values but
    `strategy: most` (`POST /v1/policies/{id}/preset/upstream` restores upstream's)."""
    pool_id = runtime.pools.resolve(session, body.pool)
    spec = PolicySpec.model_validate(body.model_dump(exclude={"pool"}))
    policy = service.add_policy(session, runtime.policy_cache, pool_id, spec, actor)
    return read_policy(policy, pool_names(session))


@router.get("/v1/policies/{policy_id}", response_model=PolicyRead)
def get_policy(policy_id: IdPath, session: SessionDep, _: ActorDep) -> PolicyRead:
    return read_policy(service.get_policy(session, policy_id), pool_names(session))


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

    Send `null` for an SLO default to remove it. With `base_version`, the change is refused
    (409, with `current_version`) if someone changed the policy since that version.
    """
    fields = validate_body(PolicyUpdate, body).model_dump(exclude_unset=True)
    base_version = fields.pop("base_version", None)
    try:
        policy = service.edit_policy(
            session, runtime.policy_cache, policy_id, fields, actor, base_version
        )
    except ValidationError as exc:  # e.g. null for a field that must have a value
        raise as_request_error(exc) from None
    return read_policy(policy, pool_names(session))


@router.get("/v1/policies/{policy_id}/history", response_model=list[PolicyChange])
def policy_history(policy_id: IdPath, session: SessionDep, _: ActorDep) -> list[PolicyChange]:
    """Every version, newest first: who, when, and each changed field's old and new value."""
    policy = service.get_policy(session, policy_id)
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
    version: int = Field(ge=1, le=2**31 - 1, description="The version to make current again.")
    base_version: int | None = BASE_VERSION


@router.post("/v1/policies/{policy_id}/restore", response_model=PolicyRead)
def restore_policy(
    policy_id: IdPath,
    body: RestoreRequest,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
) -> PolicyRead:
    """Make an earlier version current again; recorded as a new version."""
    policy = service.restore_policy(
        session, runtime.policy_cache, policy_id, body.version, actor, body.base_version
    )
    return read_policy(policy, pool_names(session))


class PresetRequest(BaseModel):
    base_version: int | None = BASE_VERSION


@router.post("/v1/policies/{policy_id}/preset/{preset}", response_model=PolicyRead)
def apply_preset(
    policy_id: IdPath,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
    preset: str = PathParam(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="Preset name."),
    body: PresetRequest | None = None,
) -> PolicyRead:
    """Set the routing to a preset (`upstream`: llm-d's shipped defaults), keeping the pool's
    SLOs and KV-transfer facts; recorded as a new version."""
    base_version = body.base_version if body is not None else None
    policy = service.apply_preset(
        session, runtime.policy_cache, policy_id, preset, actor, base_version
    )
    return read_policy(policy, pool_names(session))


def _objective_read(o: Objective, names: dict[int, str]) -> ObjectiveRead:
    return ObjectiveRead(
        id=o.id,
        pool=names[o.pool_id],
        name=o.name,
        priority=o.priority,
        sheddable=o.priority < 0,
        description=o.description,
        version=o.version,
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
    objective = service.add_objective(session, runtime.policy_cache, pool_id, body, actor)
    return _objective_read(objective, pool_names(session))


@router.get("/v1/objectives/{objective_id}", response_model=ObjectiveRead, tags=["objectives"])
def get_objective(objective_id: IdPath, session: SessionDep, _: ActorDep) -> ObjectiveRead:
    return _objective_read(service.get_objective(session, objective_id), pool_names(session))


@router.put("/v1/objectives/{objective_id}", response_model=ObjectiveRead, tags=["objectives"])
def update_objective(
    objective_id: IdPath,
    body: ObjectiveUpdate,
    runtime: RuntimeDep,
    session: SessionDep,
    actor: EditorDep,
) -> ObjectiveRead:
    objective = service.update_objective(session, runtime.policy_cache, objective_id, body, actor)
    return _objective_read(objective, pool_names(session))


@router.delete("/v1/objectives/{objective_id}", status_code=204, tags=["objectives"])
def delete_objective(
    objective_id: IdPath, runtime: RuntimeDep, session: SessionDep, _: EditorDep
) -> Response:
    service.delete_objective(session, runtime.policy_cache, objective_id)
    return Response(status_code=204)


@router.get("/v1/policies/{policy_id}/epp-config", response_class=Response)
def epp_config(policy_id: IdPath, session: SessionDep, _: ActorDep) -> Response:
    """The llm-d router's EndpointPickerConfig (YAML) for this policy, ready to apply."""
    filename, body = service.epp_config_export(session, policy_id)
    return Response(
        body,
        media_type="application/yaml",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
