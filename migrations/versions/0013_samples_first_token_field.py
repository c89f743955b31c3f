"""samples.ms_since_last_first_token: when the pod last finished a prefill

Ours, optional on the wire (0 when a router does not send it, as upstream's EPP does not): how
long since the pod last streamed a request's first token. With the oldest request's wait it
dates the prefills the pod holds, from which the TTFT model estimates the prefill work left
ahead (backend/predictor/features.py prefill_left, at a prefill rate measured on
the training window; issue 17).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant default: recorded without rewriting the table; rows already stored read 0.
    op.add_column(
        "samples",
        sa.Column(
            "ms_since_last_first_token", sa.Float(), nullable=False, server_default=sa.text("0")
        ),
    )


def downgrade() -> None:
    op.drop_column("samples", "ms_since_last_first_token")
