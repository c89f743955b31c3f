"""desired_replicas: a P/D pool's split into prefill and decode pods

Under P/D disaggregation a pool is two deployments, scaled apart: desired replicas says how
many of its pods should be prefill pods (``prefill_replicas``, the rest decode pods) and how
many of the pods its samples came from were (``current_prefill_pods``). Both null for an
aggregated pool, which is every row stored before.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("desired_replicas", sa.Column("prefill_replicas", sa.Integer(), nullable=True))
    op.add_column(
        "desired_replicas", sa.Column("current_prefill_pods", sa.Integer(), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("desired_replicas") as batch:  # SQLite drops columns by copy
        batch.drop_column("current_prefill_pods")
        batch.drop_column("prefill_replicas")
