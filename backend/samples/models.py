from __future__ import annotations

import enum
from datetime import datetime
from typing import Literal

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    String,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from backend.db import Base

# SQLite only auto-increments a column declared exactly INTEGER PRIMARY KEY.
BigId = BigInteger().with_variant(Integer(), "sqlite")


class TargetCode(enum.IntEnum):
    """What a sample's label measures. Stored as a small integer."""

    TTFT = 0
    TPOT = 1

    @property
    def label(self) -> Literal["ttft", "tpot"]:
        return "ttft" if self is TargetCode.TTFT else "tpot"

    @classmethod
    def from_label(cls, label: str) -> TargetCode:
        return cls[label.upper()]


class Sample(Base):
    """One row of a (pool, target) window. An entry with both labels > 0 becomes two rows."""

    __tablename__ = "samples"
    __table_args__ = (
        # Serves trimming (newest `cap` per bucket, in id order) and the training read; is_test
        # last so that per-bucket train/test counts are index-only scans.
        Index("ix_samples_window", "pool_id", "target", "bucket", "id", "is_test"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    target: Mapped[int] = mapped_column(SmallInteger)
    bucket: Mapped[int] = mapped_column(SmallInteger)
    is_test: Mapped[bool] = mapped_column(Boolean)
    kv_cache_percentage: Mapped[float] = mapped_column(Float)
    input_token_length: Mapped[int] = mapped_column(Integer)
    num_request_waiting: Mapped[int] = mapped_column(Integer)
    num_request_running: Mapped[int] = mapped_column(Integer)
    num_tokens_generated: Mapped[int] = mapped_column(Integer)
    prefix_cache_score: Mapped[float] = mapped_column(Float)
    pod_type: Mapped[int] = mapped_column(SmallInteger)
    prefill_tokens_in_flight: Mapped[int] = mapped_column(Integer)
    decode_tokens_in_flight: Mapped[int] = mapped_column(Integer)
    encoder_input_size: Mapped[int] = mapped_column(Integer)
    encoder_matched_size: Mapped[int] = mapped_column(Integer)
    # Ours, optional wire fields (0 when not sent): how far the pod's work had got.
    ms_since_last_token: Mapped[float] = mapped_column(Float, server_default="0")
    oldest_prefill_wait_ms: Mapped[float] = mapped_column(Float, server_default="0")
    ms_since_last_first_token: Mapped[float] = mapped_column(Float, server_default="0")
    pod_class: Mapped[str | None] = mapped_column(String(63))
    latency_ms: Mapped[float] = mapped_column(Float)
    predicted_ms: Mapped[float | None] = mapped_column(Float)
    pod: Mapped[str | None] = mapped_column(String(253))
    observed_at: Mapped[datetime] = mapped_column()
    # The pod_type as the EPP sent it (NULL for none): `pod_type` holds the class the model
    # reads, this keeps the llm-d.ai/role value itself, so that an unknown role is reported.
    pod_role: Mapped[str | None] = mapped_column(String(63))
    # Ours, optional: a session or shared-prompt id, so that a replay built from the samples
    # (backend/sim/fromsamples.py) knows which requests share a prefix.
    prefix_group: Mapped[str | None] = mapped_column(String(253))


class WindowFlush(Base):
    """The audit trail of window resets: who emptied which pool's window, when, why, how much."""

    __tablename__ = "window_flushes"
    __table_args__ = (Index("ix_window_flushes_pool", "pool_id", "id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"))
    flushed_at: Mapped[datetime] = mapped_column(server_default=func.now())
    flushed_by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(String(500))
    older_than: Mapped[datetime | None] = mapped_column()
    """Only rows observed before this were removed (None: the whole window)."""
    ttft_removed: Mapped[int] = mapped_column(Integer)
    tpot_removed: Mapped[int] = mapped_column(Integer)


# The wire features as stored, in the order ingestion writes them and training reads them
# (pod_type as its integer code).
WINDOW_FEATURES: tuple[str, ...] = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "num_tokens_generated",
    "prefix_cache_score",
    "pod_type",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "encoder_input_size",
    "encoder_matched_size",
    "ms_since_last_token",
    "oldest_prefill_wait_ms",
    "ms_since_last_first_token",
)

# Column order used by ingestion (COPY and executemany) and by the benchmark's COPY ceiling.
SAMPLE_COLUMNS: tuple[str, ...] = (
    "pool_id",
    "target",
    "bucket",
    "is_test",
    *WINDOW_FEATURES,
    "pod_class",
    "latency_ms",
    "predicted_ms",
    "pod",
    "observed_at",
    "pod_role",
    "prefix_group",
)
