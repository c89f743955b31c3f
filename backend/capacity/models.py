from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base


class DesiredReplicas(Base):
    """Each pool's last desired-replica count, written by the periodic job (a worker) and read
    by every API process: one row per pool, replaced on every run."""

    __tablename__ = "desired_replicas"

    pool_id: Mapped[int] = mapped_column(
        ForeignKey("pools.id", ondelete="CASCADE"), primary_key=True
    )
    replicas: Mapped[int] = mapped_column(Integer)
    met: Mapped[bool] = mapped_column(Boolean)
    """False: even the most pods tried miss the target (``replicas`` is that maximum)."""
    attainment: Mapped[float] = mapped_column(Float)
    target: Mapped[float] = mapped_column(Float)
    current_pods: Mapped[int] = mapped_column(Integer)
    prefill_replicas: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """A P/D pool's prefill pods among ``replicas`` (the rest decode pods); None: aggregated."""
    current_prefill_pods: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """Of ``current_pods``, those the samples name prefill endpoints; None: aggregated."""
    requests: Mapped[int] = mapped_column(Integer)
    rate_rps: Mapped[float] = mapped_column(Float)
    profile: Mapped[str] = mapped_column(String(100))
    scale: Mapped[float] = mapped_column(Float)
    calibration_error: Mapped[float] = mapped_column(Float)
    simulations: Mapped[int] = mapped_column(Integer)
    cpu_s: Mapped[float] = mapped_column(Float)
    policy_version: Mapped[int | None] = mapped_column(Integer)
    computed_at: Mapped[datetime] = mapped_column()


class DesiredReplicasPoint(Base):
    """One desired-replicas run of a pool, kept for ``desired_history_s`` so that every API
    replica draws the same history on the Overview (a process's memory would show only the
    runs it saw since it started)."""

    __tablename__ = "desired_replicas_history"
    __table_args__ = (Index("ix_desired_replicas_history_pool_time", "pool_id", "computed_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    computed_at: Mapped[datetime] = mapped_column()
    replicas: Mapped[int] = mapped_column(Integer)
    met: Mapped[bool] = mapped_column(Boolean)
    attainment: Mapped[float] = mapped_column(Float)
    current_pods: Mapped[int] = mapped_column(Integer)
