"""foundation: pools and the samples window

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    pools = op.create_table(
        "pools",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("description", sa.String(length=500), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pools")),
        sa.UniqueConstraint("name", name=op.f("uq_pools_name")),
    )
    op.create_table(
        "samples",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("pool_id", sa.Integer(), nullable=False),
        sa.Column("target", sa.SmallInteger(), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("is_test", sa.Boolean(), nullable=False),
        sa.Column("kv_cache_percentage", sa.Float(), nullable=False),
        sa.Column("input_token_length", sa.Integer(), nullable=False),
        sa.Column("num_request_waiting", sa.Integer(), nullable=False),
        sa.Column("num_request_running", sa.Integer(), nullable=False),
        sa.Column("num_tokens_generated", sa.Integer(), nullable=False),
        sa.Column("prefix_cache_score", sa.Float(), nullable=False),
        sa.Column("pod_type", sa.SmallInteger(), nullable=False),
        sa.Column("prefill_tokens_in_flight", sa.Integer(), nullable=False),
        sa.Column("decode_tokens_in_flight", sa.Integer(), nullable=False),
        sa.Column("encoder_input_size", sa.Integer(), nullable=False),
        sa.Column("encoder_matched_size", sa.Integer(), nullable=False),
        sa.Column("pod_class", sa.String(length=63), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=False),
        sa.Column("predicted_ms", sa.Float(), nullable=True),
        sa.Column("pod", sa.String(length=253), nullable=True),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["pool_id"], ["pools.id"], name=op.f("fk_samples_pool_id_pools"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samples")),
    )
    op.create_index("ix_samples_window", "samples", ["pool_id", "target", "bucket", "id"])
    # The pool served at the root paths exists from the start.
    op.bulk_insert(
        pools, [{"name": "default", "description": "The pool served at the root paths."}]
    )


def downgrade() -> None:
    op.drop_index("ix_samples_window", table_name="samples")
    op.drop_table("samples")
    op.drop_table("pools")
