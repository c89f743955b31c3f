"""window index covers is_test (per-bucket train/test counts without reading rows)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_samples_window", table_name="samples")
    op.create_index(
        "ix_samples_window", "samples", ["pool_id", "target", "bucket", "id", "is_test"]
    )


def downgrade() -> None:
    op.drop_index("ix_samples_window", table_name="samples")
    op.create_index("ix_samples_window", "samples", ["pool_id", "target", "bucket", "id"])
