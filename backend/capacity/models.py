from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String
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
    requests: Mapped[int] = mapped_column(Integer)
    rate_rps: Mapped[float] = mapped_column(Float)
    profile: Mapped[str] = mapped_column(String(100))
    scale: Mapped[float] = mapped_column(Float)
    calibration_error: Mapped[float] = mapped_column(Float)
    simulations: Mapped[int] = mapped_column(Integer)
    cpu_s: Mapped[float] = mapped_column(Float)
    policy_version: Mapped[int | None] = mapped_column(Integer)
    computed_at: Mapped[datetime] = mapped_column()
