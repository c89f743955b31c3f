"""the default pool's untouched policy moves to a new pool's default strategy (`most`)

A new pool's policy is upstream's values but for the strategy: `most`, chosen under the fair
benchmark protocol (docs/benchmarks.md, "New pools' default policy"). 0003 stored upstream's
`least` for the `default` pool. Where nobody has changed that policy since (version 1, written by
the system) it becomes version 2 with `most`, recorded in its history like any change, so the
`upstream` preset or restoring version 1 puts `least` back. An edited policy is left alone.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

SYSTEM = "system"
CHANGE = {"strategy": ["least", "most"]}

pools = sa.table("pools", sa.column("id", sa.Integer), sa.column("name", sa.String))
policies = sa.table(
    "policies",
    sa.column("id", sa.Integer),
    sa.column("pool_id", sa.Integer),
    sa.column("version", sa.Integer),
    sa.column("spec", sa.JSON),
    sa.column("updated_at", sa.DateTime(timezone=True)),
    sa.column("updated_by", sa.String),
)
policy_versions = sa.table(
    "policy_versions",
    sa.column("policy_id", sa.Integer),
    sa.column("version", sa.Integer),
    sa.column("action", sa.String),
    sa.column("spec", sa.JSON),
    sa.column("changes", sa.JSON),
    sa.column("changed_by", sa.String),
)


def _default_policy(bind: sa.Connection) -> Any:
    return bind.execute(
        sa.select(policies.c.id, policies.c.version, policies.c.spec, policies.c.updated_by)
        .select_from(policies.join(pools, pools.c.id == policies.c.pool_id))
        .where(pools.c.name == "default")
    ).first()


def upgrade() -> None:
    bind = op.get_bind()
    row = _default_policy(bind)
    if row is None or row.version != 1 or row.updated_by != SYSTEM:
        return
    if row.spec.get("strategy") != "least":
        return
    spec = {**row.spec, "strategy": "most"}
    bind.execute(
        policies.update()
        .where(policies.c.id == row.id)
        .values(spec=spec, version=2, updated_at=sa.func.now(), updated_by=SYSTEM)
    )
    bind.execute(
        policy_versions.insert().values(
            policy_id=row.id,
            version=2,
            action="update",
            spec=spec,
            changes=CHANGE,
            changed_by=SYSTEM,
        )
    )


def downgrade() -> None:
    # Undo only this migration's own version: a policy changed since keeps its history.
    bind = op.get_bind()
    row = _default_policy(bind)
    if row is None or row.version != 2 or row.updated_by != SYSTEM:
        return
    ours = bind.execute(
        sa.select(policy_versions.c.changes).where(
            policy_versions.c.policy_id == row.id, policy_versions.c.version == 2
        )
    ).scalar()
    if ours != CHANGE:
        return
    bind.execute(
        policy_versions.delete().where(
            policy_versions.c.policy_id == row.id, policy_versions.c.version == 2
        )
    )
    bind.execute(
        policies.update()
        .where(policies.c.id == row.id)
        .values(spec={**row.spec, "strategy": "least"}, version=1, updated_by=SYSTEM)
    )
