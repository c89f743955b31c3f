from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base
from backend.samples.models import BigId


class ModelVersion(Base):
    """One trained model of a (pool, target), with its held-out metrics and its artifact.

    The artifact is the predictor's own envelope (XGBoost UBJ/JSON plus coefficients as
    JSON); never a pickle, so a row can be read back without trusting it to run code.
    """

    __tablename__ = "model_versions"
    __table_args__ = (Index("ix_model_versions_pool_target", "pool_id", "target", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    target: Mapped[int] = mapped_column(SmallInteger)
    kind: Mapped[str] = mapped_column(String(32))
    objective: Mapped[str] = mapped_column(String(16))
    quantile: Mapped[float] = mapped_column(Float)
    status: Mapped[str] = mapped_column(String(16))  # active | retired | rejected
    gate_reason: Mapped[str] = mapped_column(String(500), default="")
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON)
    n_train: Mapped[int] = mapped_column(Integer)
    n_test: Mapped[int] = mapped_column(Integer)
    window_max_id: Mapped[int] = mapped_column(BigId)
    train_seconds: Mapped[float] = mapped_column(Float)
    training_started_at: Mapped[datetime] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(server_default=func.now())
    activated_at: Mapped[datetime | None] = mapped_column()
    # The flood rule's state after this round (backend/predictor/gate.py): window rows far
    # outside the active model, and since when (over how many rounds) new rows mostly were.
    n_outliers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    shift_since: Mapped[datetime | None] = mapped_column()
    shift_rounds: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    shift_from_id: Mapped[int] = mapped_column(BigId, default=0, server_default="0")
    # Rows up to this id predate a change of regime and did not train this version.
    trained_from_id: Mapped[int] = mapped_column(BigId, default=0, server_default="0")
    artifact: Mapped[bytes] = mapped_column(LargeBinary, deferred=True)
    artifact_bytes: Mapped[int] = mapped_column(Integer)


class ActiveModel(Base):
    """The pointer from (pool, target) to the version being served; swapping it is activation."""

    __tablename__ = "active_models"

    pool_id: Mapped[int] = mapped_column(
        ForeignKey("pools.id", ondelete="CASCADE"), primary_key=True
    )
    target: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("model_versions.id", ondelete="CASCADE"))
    activated_at: Mapped[datetime] = mapped_column()
    activated_by: Mapped[str] = mapped_column(String(100))
