"""Policies (versioned, every change audited) and objectives.

The operations (`edit_policy`, `restore_policy`, `save_pool_policy`, the objectives' create,
update and delete) are each one unit of work: they lock the row they change, refuse a change
based on an outdated version (409), commit, and drop the routing policy cache after the commit
(see backend/transactions.py). The helpers they are built from (`create_policy`,
`update_policy`, `create_objective`) only flush, for callers that own a larger unit of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.service import Actor
from backend.exceptions import Conflict, NotFound
from backend.policies.mapping import to_scheduling
from backend.policies.models import Objective, Policy, PolicyVersion
from backend.policies.schemas import (
    SERVICE_FIELDS,
    UPSTREAM_SPEC,
    ObjectiveCreate,
    ObjectiveUpdate,
    PolicySpec,
)
from backend.pools.models import Pool
from backend.scheduling.epp_config import HeadroomOnly, epp_config_yaml, headroom_only
from backend.transactions import Invalidates, after_commit, write

SYSTEM = "system"


def get_policy(session: Session, policy_id: int, *, lock: bool = False) -> Policy:
    """The policy; with `lock`, its row is locked until the commit (`SELECT ... FOR UPDATE`),
    so that two writers take turns and the second sees the first one's version."""
    policy = session.get(Policy, policy_id, with_for_update=lock, populate_existing=lock)
    if policy is None:
        raise NotFound(f"policy {policy_id} not found")
    return policy


def policy_for_pool(session: Session, pool_id: int, *, lock: bool = False) -> Policy | None:
    query = select(Policy).where(Policy.pool_id == pool_id)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    return session.scalar(query)


def check_base_version(policy: Policy, base_version: int | None) -> None:
    """Refuse a change prepared on an older version: saving it would silently undo the
    changes made since (a lost update)."""
    if base_version is not None and base_version != policy.version:
        raise Conflict(
            f"policy {policy.id} changed since version {base_version}: it is at version "
            f"{policy.version} (last by {policy.updated_by}); reload it and apply your change "
            "again",
            current_version=policy.version,
        )


def spec_of(policy: Policy | None) -> PolicySpec:
    """The policy's spec; a new pool's default for a pool without one."""
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


def add_policy(
    session: Session, cache: Invalidates, pool_id: int, spec: PolicySpec, actor: Actor
) -> Policy:
    """Give a pool its policy (one per pool: 409 if it has one, also when two race)."""
    with write(session, conflict="this pool already has a policy; change it with PUT"):
        policy = create_policy(session, pool_id, spec, actor.name)
        _invalidate_after_commit(session, cache)
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


def changes_since(session: Session, policy: Policy, version: int) -> Sequence[PolicyVersion]:
    """The versions made after `version`, newest first: what a stale form would have undone."""
    return [v for v in history(session, policy) if v.version > version]


def _invalidate_after_commit(session: Session, cache: Invalidates) -> None:
    # Routing re-reads policies and objectives on its next decision, from committed rows only.
    after_commit(session, cache.invalidate)


def edit_policy(
    session: Session,
    cache: Invalidates,
    policy_id: int,
    fields: dict[str, Any],
    actor: Actor,
    base_version: int | None = None,
    action: str = "update",
) -> Policy:
    """Change the given fields of a policy (PUT /v1/policies/{id})."""
    with write(session, conflict=f"policy {policy_id} was changed concurrently; retry"):
        policy = get_policy(session, policy_id, lock=True)
        check_base_version(policy, base_version)
        update_policy(session, policy, fields, actor, action)
        _invalidate_after_commit(session, cache)
    return policy


# Fields a preset leaves alone: the pool's SLOs and capacity targets and its model's and
# network's facts are not routing choices, so resetting the routing to upstream's must not
# erase them.
_PRESET_KEEPS = (
    SERVICE_FIELDS
    | {"kv_bytes_per_token"}
    | {name for name in PolicySpec.model_fields if name.startswith("transfer_")}
)
PRESETS: dict[str, PolicySpec] = {"upstream": UPSTREAM_SPEC}
"""Named routing configurations one click away; ``upstream``: llm-d's shipped defaults (a new pool
starts on ``PolicySpec()``, which differs from them in the strategy)."""


def apply_preset(
    session: Session,
    cache: Invalidates,
    policy_id: int,
    preset: str,
    actor: Actor,
    base_version: int | None = None,
) -> Policy:
    """Set the policy's routing fields to a preset's (a new audited version; SLOs, capacity
    targets and the model's transfer facts stay)."""
    if preset not in PRESETS:
        raise NotFound(f"no preset {preset!r}; presets: {', '.join(PRESETS)}")
    fields = {
        k: v for k, v in PRESETS[preset].model_dump(mode="json").items() if k not in _PRESET_KEEPS
    }
    return edit_policy(session, cache, policy_id, fields, actor, base_version)


def restore_policy(
    session: Session,
    cache: Invalidates,
    policy_id: int,
    version: int,
    actor: Actor,
    base_version: int | None = None,
) -> Policy:
    """Make an earlier version current again, as a new version (history is never rewritten)."""
    old = session.scalar(
        select(PolicyVersion.spec).where(
            PolicyVersion.policy_id == policy_id, PolicyVersion.version == version
        )
    )
    if old is None:
        get_policy(session, policy_id)  # an unknown policy is named as such
        raise NotFound(f"policy {policy_id} has no version {version}")
    # Versions never change once written: reading one before the lock is safe.
    return edit_policy(session, cache, policy_id, old, actor, base_version, action="restore")


def save_pool_policy(
    session: Session,
    cache: Invalidates,
    pool_id: int,
    spec: PolicySpec,
    actor: Actor,
    base_version: int | None = None,
) -> tuple[Policy, bool]:
    """The console's form: the whole spec for a pool, creating its policy if it has none.
    Returns the policy and whether a new version was made."""
    with write(session, conflict="the policy was changed concurrently; reload and retry"):
        policy = policy_for_pool(session, pool_id, lock=True)
        if policy is None:
            if base_version:
                raise Conflict("the policy was deleted since you opened it", current_version=0)
            policy = create_policy(session, pool_id, spec, actor.name)
            changed = True
        else:
            check_base_version(policy, base_version)
            before = policy.version
            update_policy(session, policy, spec.model_dump(mode="json"), actor)
            changed = policy.version != before
        _invalidate_after_commit(session, cache)
    return policy, changed


def epp_config_export(session: Session, policy_id: int) -> tuple[str, str]:
    """The llm-d router's EndpointPickerConfig (YAML) for a policy, and its file name.

    Names in the comment lines are written as quoted literals (control characters escaped):
    a user or pool name with a line break must not start a YAML line of its own.
    A policy whose chain is Headroom-only (``lmetric``) has none: 409, saying to route with
    ``/v1/schedule``.
    """
    policy = get_policy(session, policy_id)
    pool = session.scalar(select(Pool.name).where(Pool.id == policy.pool_id))
    scheduling = to_scheduling(PolicySpec.model_validate(policy.spec))
    try:
        config = epp_config_yaml(scheduling)
    except HeadroomOnly as exc:
        raise Conflict(f"policy {policy.id} (pool {pool!r}): {exc}") from None
    if scheduling.chain == "predicted-latency":
        notes = [
            "# Options only Headroom's /v1/schedule applies (no upstream plugin implements them):",
            *(f"#   {key}: {value}" for key, value in headroom_only(scheduling).items()),
        ]
    else:
        notes = [
            f"# Chain: {scheduling.chain} (upstream plugins only; the predicted-latency "
            "options of the policy do not apply to it)."
        ]
    lines = [
        f"# EndpointPickerConfig for pool {pool!r}, policy version {policy.version}.",
        f"# Exported by Headroom; last changed by {policy.updated_by!r} at "
        f"{policy.updated_at.isoformat()}.",
        *notes,
    ]
    body = "\n".join(lines) + "\n" + config
    return f"epp-config-{pool}-v{policy.version}.yaml", body


def list_objectives(session: Session, pool_id: int | None) -> Sequence[Objective]:
    query = select(Objective).order_by(Objective.pool_id, Objective.priority.desc(), Objective.name)
    if pool_id is not None:
        query = query.where(Objective.pool_id == pool_id)
    return session.scalars(query).all()


def get_objective(session: Session, objective_id: int, *, lock: bool = False) -> Objective:
    objective = session.get(Objective, objective_id, with_for_update=lock, populate_existing=lock)
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


def add_objective(
    session: Session, cache: Invalidates, pool_id: int, data: ObjectiveCreate, actor: Actor
) -> Objective:
    """Create an objective; its name is unique within the pool (409 otherwise, also when two
    requests race to create it)."""
    with write(session, conflict=f"objective {data.name!r} already exists in this pool"):
        objective = create_objective(session, pool_id, data, actor)
        _invalidate_after_commit(session, cache)
    return objective


def update_objective(
    session: Session, cache: Invalidates, objective_id: int, data: ObjectiveUpdate, actor: Actor
) -> Objective:
    """Change the fields given; the row is locked so that concurrent edits take turns, and an
    edit based on an older version than the stored one is refused (409)."""
    with write(session):
        objective = get_objective(session, objective_id, lock=True)
        if data.base_version is not None and data.base_version != objective.version:
            raise Conflict(
                f"objective {objective.name!r} changed since version {data.base_version}: it is "
                f"at version {objective.version} (last by {objective.updated_by}), priority "
                f"{objective.priority}, description {objective.description!r}",
                current_version=objective.version,
            )
        for key, value in data.model_dump(exclude_unset=True, exclude={"base_version"}).items():
            if value is not None:
                setattr(objective, key, value)
        objective.version += 1
        objective.updated_by = actor.name
        objective.updated_at = datetime.now(UTC)
        _invalidate_after_commit(session, cache)
    return objective


def delete_objective(session: Session, cache: Invalidates, objective_id: int) -> Objective:
    with write(session):
        objective = get_objective(session, objective_id, lock=True)
        session.delete(objective)
        _invalidate_after_commit(session, cache)
    return objective
