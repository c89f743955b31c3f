"""objectives get a version, so that an edit based on an outdated one is refused (409)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Existing objectives start at version 1, as a new one does.
    with op.batch_alter_table("objectives") as batch:
        batch.add_column(
            sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("objectives") as batch:
        batch.drop_column("version")
