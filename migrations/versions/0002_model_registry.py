"""model registry

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 08:46:19.831325
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_versions",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.SmallInteger(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("objective", sa.String(length=16), nullable=False),
        sa.Column("quantile", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("gate_reason", sa.String(length=500), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("n_train", sa.Integer(), nullable=False),
        sa.Column("n_test", sa.Integer(), nullable=False),
        sa.Column("window_max_id", BigId, nullable=False),
        sa.Column("train_seconds", sa.Float(), nullable=False),
        sa.Column("training_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("artifact", sa.LargeBinary(), nullable=False),
        sa.Column("artifact_bytes", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_model_versions_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_versions")),
    )
    op.create_index("ix_model_versions_pool_target", "model_versions", ["pool_id", "target", "id"])

    op.create_table(
        "active_models",
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.SmallInteger(), nullable=False),
        sa.Column("version_id", BigId, nullable=False),
        sa.Column("activated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("activated_by", sa.String(length=100), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"],
            ["pools.id"],
            name=op.f("fk_active_models_pool_id_pools"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["version_id"],
            ["model_versions.id"],
            name=op.f("fk_active_models_version_id_model_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("pool_id", "target", name=op.f("pk_active_models")),
    )


def downgrade() -> None:
    op.drop_table("active_models")
    op.drop_index("ix_model_versions_pool_target", table_name="model_versions")

    op.drop_table("model_versions")
