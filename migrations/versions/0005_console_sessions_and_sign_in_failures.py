"""console sessions stored server-side, and failed sign-ins for the sign-in rate limit

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ui_sessions",
        sa.Column("session_hash", sa.String(length=64), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("user_agent", sa.String(length=255), nullable=True),
        sa.Column("client_ip", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_ui_sessions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_hash", name=op.f("pk_ui_sessions")),
    )
    op.create_index("ix_ui_sessions_user_id", "ui_sessions", ["user_id"])
    op.create_index("ix_ui_sessions_expires_at", "ui_sessions", ["expires_at"])

    op.create_table(
        "sign_in_failures",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("username", sa.String(length=63), nullable=False),
        sa.Column("client_ip", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_failures")),
    )
    op.create_index("ix_sign_in_failures_username", "sign_in_failures", ["username", "at"])
    op.create_index("ix_sign_in_failures_client_ip", "sign_in_failures", ["client_ip", "at"])


def downgrade() -> None:
    op.drop_index("ix_sign_in_failures_client_ip", table_name="sign_in_failures")
    op.drop_index("ix_sign_in_failures_username", table_name="sign_in_failures")
    op.drop_table("sign_in_failures")
    op.drop_index("ix_ui_sessions_expires_at", table_name="ui_sessions")
    op.drop_index("ix_ui_sessions_user_id", table_name="ui_sessions")
    op.drop_table("ui_sessions")
