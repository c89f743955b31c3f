"""desired_replicas_history (each pool's recent desired-replicas runs, for the console's chart)

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "desired_replicas_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("met", sa.Boolean(), nullable=False),
        sa.Column("attainment", sa.Float(), nullable=False),
        sa.Column("current_pods", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_desired_replicas_history_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_desired_replicas_history")),
    )
    op.create_index(
        "ix_desired_replicas_history_pool_time",
        "desired_replicas_history",
        ["pool_id", "computed_at"],
    )


def downgrade() -> None:
    op.drop_index("ix_desired_replicas_history_pool_time", table_name="desired_replicas_history")
    op.drop_table("desired_replicas_history")
