"""Policies (versioned, every change audited) and objectives. Services never commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.service import Actor
from backend.policies.models import Objective, Policy, PolicyVersion
from backend.policies.schemas import ObjectiveCreate, ObjectiveUpdate, PolicySpec

SYSTEM = "system"


class NotFound(LookupError):
    pass


class Conflict(ValueError):
    pass


def get_policy(session: Session, policy_id: int) -> Policy:
    policy = session.get(Policy, policy_id)
    if policy is None:
        raise NotFound(f"policy {policy_id} not found")
    return policy


def policy_for_pool(session: Session, pool_id: int) -> Policy | None:
    return session.scalar(select(Policy).where(Policy.pool_id == pool_id))


def spec_of(policy: Policy | None) -> PolicySpec:
    """The policy's spec; upstream's defaults for a pool without one."""
    return PolicySpec.model_validate(policy.spec) if policy is not None else PolicySpec()


def list_policies(session: Session) -> Sequence[Policy]:
    return session.scalars(select(Policy).order_by(Policy.id)).all()


def _record(
    session: Session, policy: Policy, action: str, changes: dict[str, Any], by: str
) -> None:
    session.add(
        PolicyVersion(
            policy_id=policy.id,
            version=policy.version,
            action=action,
            spec=policy.spec,
            changes=changes,
            changed_by=by,
        )
    )


def create_policy(session: Session, pool_id: int, spec: PolicySpec, actor: str) -> Policy:
    if policy_for_pool(session, pool_id) is not None:
        raise Conflict("this pool already has a policy; change it with PUT")
    data = spec.model_dump(mode="json")
    policy = Policy(pool_id=pool_id, version=1, spec=data, updated_by=actor)
    session.add(policy)
    session.flush()
    _record(session, policy, "create", {k: [None, v] for k, v in data.items()}, actor)
    session.flush()
    return policy


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [old.get(k), new[k]] for k in new if old.get(k) != new[k]}


def update_policy(
    session: Session, policy: Policy, fields: dict[str, Any], actor: Actor, action: str = "update"
) -> Policy:
    """Apply `fields` (already validated) on top of the current spec; a no-op makes no version."""
    # Both sides through the schema: a field added since the spec was stored shows its default
    # on both sides instead of a spurious change.
    current = PolicySpec.model_validate(policy.spec).model_dump(mode="json")
    merged = PolicySpec.model_validate({**current, **fields}).model_dump(mode="json")
    changes = diff(current, merged)
    if not changes:
        return policy
    policy.spec = merged
    policy.version += 1
    policy.updated_by = actor.name
    policy.updated_at = datetime.now(UTC)
    session.flush()
    _record(session, policy, action, changes, actor.name)
    session.flush()
    return policy


def history(session: Session, policy: Policy) -> Sequence[PolicyVersion]:
    return session.scalars(
        select(PolicyVersion)
        .where(PolicyVersion.policy_id == policy.id)
        .order_by(PolicyVersion.version.desc())
    ).all()


def restore(session: Session, policy: Policy, version: int, actor: Actor) -> Policy:
    """Make an earlier version current again, as a new version (history is never rewritten)."""
    old = session.scalar(
        select(PolicyVersion).where(
            PolicyVersion.policy_id == policy.id, PolicyVersion.version == version
        )
    )
    if old is None:
        raise NotFound(f"policy {policy.id} has no version {version}")
    return update_policy(session, policy, old.spec, actor, action="restore")


def list_objectives(session: Session, pool_id: int | None) -> Sequence[Objective]:
    query = select(Objective).order_by(Objective.pool_id, Objective.priority.desc(), Objective.name)
    if pool_id is not None:
        query = query.where(Objective.pool_id == pool_id)
    return session.scalars(query).all()


def get_objective(session: Session, objective_id: int) -> Objective:
    objective = session.get(Objective, objective_id)
    if objective is None:
        raise NotFound(f"objective {objective_id} not found")
    return objective


def objective_by_name(session: Session, pool_id: int, name: str) -> Objective | None:
    return session.scalar(
        select(Objective).where(Objective.pool_id == pool_id, Objective.name == name)
    )


def create_objective(
    session: Session, pool_id: int, data: ObjectiveCreate, actor: Actor
) -> Objective:
    if objective_by_name(session, pool_id, data.name) is not None:
        raise Conflict(f"objective {data.name!r} already exists in this pool")
    objective = Objective(
        pool_id=pool_id,
        name=data.name,
        priority=data.priority,
        description=data.description,
        updated_by=actor.name,
    )
    session.add(objective)
    session.flush()
    return objective


def update_objective(
    session: Session, objective: Objective, data: ObjectiveUpdate, actor: Actor
) -> Objective:
    for key, value in data.model_dump(exclude_unset=True).items():
        if value is not None:
            setattr(objective, key, value)
    objective.updated_by = actor.name
    objective.updated_at = datetime.now(UTC)
    session.flush()
    return objective
