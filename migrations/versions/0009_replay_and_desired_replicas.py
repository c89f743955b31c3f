"""samples.prefix_group; desired_replicas (each pool's last desired-replica count)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable and without a default: adding it rewrites nothing on PostgreSQL.
    op.add_column("samples", sa.Column("prefix_group", sa.String(length=253), nullable=True))
    op.create_table(
        "desired_replicas",
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("met", sa.Boolean(), nullable=False),
        sa.Column("attainment", sa.Float(), nullable=False),
        sa.Column("target", sa.Float(), nullable=False),
        sa.Column("current_pods", sa.Integer(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("rate_rps", sa.Float(), nullable=False),
        sa.Column("profile", sa.String(length=100), nullable=False),
        sa.Column("scale", sa.Float(), nullable=False),
        sa.Column("calibration_error", sa.Float(), nullable=False),
        sa.Column("simulations", sa.Integer(), nullable=False),
        sa.Column("cpu_s", sa.Float(), nullable=False),
        sa.Column("policy_version", sa.Integer(), nullable=True),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_desired_replicas_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pool_id", name=op.f("pk_desired_replicas")),
    )


def downgrade() -> None:
    op.drop_table("desired_replicas")
    op.drop_column("samples", "prefix_group")
