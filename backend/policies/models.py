from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, UniqueConstraint, func, text
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base


class Policy(Base):
    """A pool's routing policy: the current version of its spec (one policy per pool)."""

    __tablename__ = "policies"

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), unique=True)
    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_by: Mapped[str] = mapped_column(String(100))


class PolicyVersion(Base):
    """The audit trail: every version of a policy, who made it, when, and what changed."""

    __tablename__ = "policy_versions"
    __table_args__ = (UniqueConstraint("policy_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    policy_id: Mapped[int] = mapped_column(ForeignKey("policies.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    changes: Mapped[dict[str, Any]] = mapped_column(JSON)
    changed_at: Mapped[datetime] = mapped_column(server_default=func.now())
    changed_by: Mapped[str] = mapped_column(String(100))


class Objective(Base):
    """An InferenceObjective: a named priority; below zero the request is sheddable."""

    __tablename__ = "objectives"
    __table_args__ = (
        UniqueConstraint("pool_id", "name"),
        Index("ix_objectives_pool", "pool_id"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    priority: Mapped[int] = mapped_column(Integer)
    description: Mapped[str] = mapped_column(String(500), default="")
    # Counts the changes: an edit naming an older one is refused instead of undoing the others.
    version: Mapped[int] = mapped_column(Integer, default=1, server_default=text("1"))
    updated_at: Mapped[datetime] = mapped_column(server_default=func.now())
    updated_by: Mapped[str] = mapped_column(String(100))
