"""samples.pod_role: the pod_type label value as the EPP sent it

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable and without a default: adding it rewrites nothing on PostgreSQL.
    op.add_column("samples", sa.Column("pod_role", sa.String(length=63), nullable=True))


def downgrade() -> None:
    op.drop_column("samples", "pod_role")
