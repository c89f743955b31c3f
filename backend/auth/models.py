from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, String, func
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(63), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))  # argon2id, never the password
    role: Mapped[str] = mapped_column(String(16))  # viewer | editor | admin
    disabled: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())


class ApiToken(Base):
    """A bearer token. Only its SHA-256 is stored: the token itself is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))  # lets a human tell tokens apart
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column()


class UiSession(Base):
    """A signed-in console session. The cookie carries a random id; only its SHA-256 is stored,
    so a copy of this table (a backup, a replica) cannot be turned into a working cookie.

    The row is what makes a session valid: signing out, a password change, disabling the user or
    an admin's "sign out everywhere" delete it, and every API replica sees that at once.
    """

    __tablename__ = "ui_sessions"
    __table_args__ = (
        # Counting and ending a user's sessions (and the FK's ON DELETE CASCADE on PostgreSQL).
        Index("ix_ui_sessions_user_id", "user_id"),
        # The periodic purge of expired rows.
        Index("ix_ui_sessions_expires_at", "expires_at"),
    )

    session_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # Times come from the application's clock (not the database's), so that tests can move it.
    created_at: Mapped[datetime] = mapped_column()
    last_seen_at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime] = mapped_column()
    # For the Admin page and forensics only; never part of the check.
    user_agent: Mapped[str | None] = mapped_column(String(255))
    client_ip: Mapped[str | None] = mapped_column(String(64))


class SignInFailure(Base):
    """One failed console sign-in. Kept in the database (not in process memory) so that the
    limit holds across API replicas; rows older than the window are purged periodically."""

    __tablename__ = "sign_in_failures"
    __table_args__ = (
        # The two limits each count the failures of one key within the window.
        Index("ix_sign_in_failures_username", "username", "at"),
        Index("ix_sign_in_failures_client_ip", "client_ip", "at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    # As submitted (names of nobody count too: refusing only real names would reveal them).
    username: Mapped[str] = mapped_column(String(63))
    client_ip: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column()
