"""the gate's flood-rule state on each model version, and the audit trail of window flushes

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "model_versions",
        sa.Column("n_outliers", sa.Integer(), nullable=False, server_default="0"),
    )
    op.add_column(
        "model_versions", sa.Column("shift_since", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "model_versions",
        sa.Column("shift_rounds", sa.Integer(), nullable=False, server_default="0"),
    )
    for name in ("shift_from_id", "trained_from_id"):
        op.add_column(
            "model_versions",
            sa.Column(
                name,
                sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
                nullable=False,
                server_default="0",
            ),
        )
    op.create_table(
        "window_flushes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column(
            "flushed_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
        ),
        sa.Column("flushed_by", sa.String(length=100), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("older_than", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ttft_removed", sa.Integer(), nullable=False),
        sa.Column("tpot_removed", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_window_flushes_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_window_flushes")),
    )
    op.create_index("ix_window_flushes_pool", "window_flushes", ["pool_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_window_flushes_pool", table_name="window_flushes")
    op.drop_table("window_flushes")
    op.drop_column("model_versions", "trained_from_id")
    op.drop_column("model_versions", "shift_from_id")
    op.drop_column("model_versions", "shift_rounds")
    op.drop_column("model_versions", "shift_since")
    op.drop_column("model_versions", "n_outliers")
