"""auth, policies and objectives

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29 08:58:43.168362
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

DEFAULT_SPEC = {
    "default_ttft_slo_ms": None,
    "default_tpot_slo_ms": None,
    "mode": "slo",
    "strategy": "least",
    "ttft_weight": 0.8,
    "epsilon_explore_neg": 0.01,
    "strict_affinity_threshold": 0.99,
    "loose_affinity_threshold": 0.8,
    "affinity_exploration_probability": 0.01,
    "max_ttft_penalty_ms": 5000.0,
    "slo_buffer_factor": 1.0,
    "picker": "weighted_random",
    "streaming_mode": True,
    "fallback_kv_weight": 1.0,
    "fallback_queue_weight": 1.0,
    "fallback_prefix_weight": 1.0,
    "pd_selection": "greedy",
    "expected_output_tokens": 256,
    "kv_bytes_per_token": 131072,
    "transfer_same_host_gbps": 50.0,
    "transfer_same_rack_gbps": 25.0,
    "transfer_same_zone_gbps": 6.0,
    "transfer_same_region_gbps": 2.0,
    "transfer_cross_region_gbps": 0.5,
}

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=63), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("disabled", sa.Boolean(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("username", name=op.f("uq_users_username")),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("prefix", sa.String(length=12), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_api_tokens_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "objectives",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("updated_by", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_objectives_pool_id_pools"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_objectives")),
        sa.UniqueConstraint("pool_id", "name", name=op.f("uq_objectives_pool_id")),
    )
    op.create_index("ix_objectives_pool", "objectives", ["pool_id"])

    policies = op.create_table(
        "policies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("updated_by", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_policies_pool_id_pools"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policies")),
        sa.UniqueConstraint("pool_id", name=op.f("uq_policies_pool_id")),
    )
    policy_versions = op.create_table(
        "policy_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("policy_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("changes", sa.JSON(), nullable=False),
        sa.Column(
            "changed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("changed_by", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["policy_id"],
            ["policies.id"],
            name=op.f("fk_policy_versions_policy_id_policies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_policy_versions")),
        sa.UniqueConstraint("policy_id", "version", name=op.f("uq_policy_versions_policy_id")),
    )

    # The default pool gets upstream's defaults (spelled out: later code may change its own).
    bind = op.get_bind()
    pool_id = bind.execute(sa.text("SELECT id FROM pools WHERE name = 'default'")).scalar()
    if pool_id is None:
        return
    bind.execute(
        policies.insert().values(pool_id=pool_id, version=1, spec=DEFAULT_SPEC, updated_by="system")
    )
    policy_id = bind.execute(
        sa.select(policies.c.id).where(policies.c.pool_id == pool_id)
    ).scalar_one()
    bind.execute(
        policy_versions.insert().values(
            policy_id=policy_id,
            version=1,
            action="create",
            spec=DEFAULT_SPEC,
            changes={k: [None, v] for k, v in DEFAULT_SPEC.items()},
            changed_by="system",
        )
    )


def downgrade() -> None:
    op.drop_table("policy_versions")
    op.drop_table("policies")
    op.drop_index("ix_objectives_pool", table_name="objectives")

    op.drop_table("objectives")
    op.drop_table("api_tokens")
    op.drop_table("users")
