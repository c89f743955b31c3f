"""samples.ms_since_last_token, samples.oldest_prefill_wait_ms: the pods' progress fields

Ours, optional on the wire (0 when a router does not send them, as upstream's EPP does not):
how long since the pod last streamed a token, and how long its oldest request still before its
first token has waited. The TTFT model reads them (backend/predictor/features.py
PROGRESS_FIELDS; issue 17).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_COLUMNS = ("ms_since_last_token", "oldest_prefill_wait_ms")


def upgrade() -> None:
    # A constant default: PostgreSQL (11+) records it without rewriting the table, and every
    # row already stored reads 0, what its router sent by omission.
    for name in _COLUMNS:
        op.add_column(
            "samples",
            sa.Column(name, sa.Float(), nullable=False, server_default=sa.text("0")),
        )


def downgrade() -> None:
    for name in reversed(_COLUMNS):
        op.drop_column("samples", name)
