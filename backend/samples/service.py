"""Ingestion into the stratified window, trimming it back to the cap, and its statistics.

Services never commit: the caller owns the unit of work.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from backend.samples.models import SAMPLE_COLUMNS, Sample, Target
from backend.samples.schemas import (
    POD_TYPE_CODES,
    BucketCount,
    TargetStats,
    TrainingEntry,
    WindowStats,
)
from backend.samples.window import WindowSpec

Row = tuple[Any, ...]

_COPY_SQL = f"COPY samples ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN"


@dataclass(frozen=True)
class Ingested:
    accepted: int
    ttft_rows: int
    tpot_rows: int
    unlabelled: int


def build_rows(
    pool_id: int,
    entries: Sequence[TrainingEntry],
    spec: WindowSpec,
    test_fraction: float,
    rng: random.Random,
) -> tuple[list[Row], int, int]:
    """Rows in SAMPLE_COLUMNS order, plus the TTFT and TPOT row counts."""
    now = datetime.now(UTC)
    rows: list[Row] = []
    counts = {Target.TTFT: 0, Target.TPOT: 0}
    for e in entries:
        features = (
            e.kv_cache_percentage,
            e.input_token_length,
            e.num_request_waiting,
            e.num_request_running,
            e.num_tokens_generated,
            e.prefix_cache_score,
            POD_TYPE_CODES[e.pod_type or ""],
            e.prefill_tokens_in_flight,
            e.decode_tokens_in_flight,
            e.encoder_input_size,
            e.encoder_matched_size,
            e.pod_class,
        )
        bucket = spec.bucket(e.kv_cache_percentage, e.prefix_cache_score, e.num_request_waiting)
        observed = e.timestamp or now
        labels = (
            (Target.TTFT, e.actual_ttft_ms, e.predicted_ttft_ms),
            (Target.TPOT, e.actual_tpot_ms, e.predicted_tpot_ms),
        )
        for target, actual, predicted in labels:
            if actual > 0:
                # The held-out flag is drawn once, at arrival: a sample never changes sets.
                is_test = rng.random() < test_fraction
                rows.append(
                    (
                        pool_id,
                        target,
                        bucket,
                        is_test,
                        *features,
                        actual,
                        predicted,
                        e.pod,
                        observed,
                    )
                )
                counts[target] += 1
    return rows, counts[Target.TTFT], counts[Target.TPOT]


def write_rows(session: Session, rows: Sequence[Row]) -> None:
    """Append rows inside the session's transaction: COPY on PostgreSQL, executemany elsewhere."""
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        raw = connection.connection.driver_connection
        with raw.cursor() as cursor, cursor.copy(_COPY_SQL) as copy:  # type: ignore[union-attr]
            for row in rows:
                copy.write_row(row)
        return
    session.execute(insert(Sample), [dict(zip(SAMPLE_COLUMNS, row, strict=True)) for row in rows])


def ingest(
    session: Session,
    pool_id: int,
    entries: Sequence[TrainingEntry],
    spec: WindowSpec,
    test_fraction: float,
    rng: random.Random,
) -> Ingested:
    rows, n_ttft, n_tpot = build_rows(pool_id, entries, spec, test_fraction, rng)
    write_rows(session, rows)
    unlabelled = sum(1 for e in entries if e.actual_ttft_ms <= 0 and e.actual_tpot_ms <= 0)
    return Ingested(len(entries), n_ttft, n_tpot, unlabelled)


def trim_window(session: Session, pool_id: int, target: Target, cap: int) -> int:
    """Delete all but the newest `cap` rows of every over-full bucket; returns rows deleted.

    A bucket is per pod class too, so that in a mixed pool a busy GPU type cannot push a rare
    one out of the window. Runs off the ingestion path (periodically and before training), so
    that an ingest call only ever appends. Each bucket is one short indexed delete.
    """
    in_window = (Sample.pool_id == pool_id, Sample.target == int(target))
    over_full = session.execute(
        select(Sample.bucket, Sample.pod_class)
        .where(*in_window)
        .group_by(Sample.bucket, Sample.pod_class)
        .having(func.count() > cap)
    ).all()
    deleted = 0
    for bucket, pod_class in over_full:
        same = (
            *in_window,
            Sample.bucket == bucket,
            Sample.pod_class.is_(None) if pod_class is None else Sample.pod_class == pod_class,
        )
        cutoff = (
            select(Sample.id)
            .where(*same)
            .order_by(Sample.id.desc())
            .offset(cap)
            .limit(1)
            .scalar_subquery()
        )
        result = session.execute(delete(Sample).where(*same, Sample.id <= cutoff))
        deleted += result.rowcount  # type: ignore[attr-defined]
    return deleted


def bucket_counts(session: Session, pool_id: int) -> dict[tuple[int, int, bool], int]:
    """(target, bucket, is_test) -> rows stored."""
    result = session.execute(
        select(Sample.target, Sample.bucket, Sample.is_test, func.count())
        .where(Sample.pool_id == pool_id)
        .group_by(Sample.target, Sample.bucket, Sample.is_test)
    )
    return {(t, b, bool(s)): n for t, b, s, n in result}


def window_stats(session: Session, pool: str, pool_id: int, spec: WindowSpec) -> WindowStats:
    counts = bucket_counts(session, pool_id)
    targets: dict[str, TargetStats] = {}
    for target in Target:
        per_bucket: dict[int, list[int]] = {}
        for (t, bucket, is_test), n in counts.items():
            if t == target:
                per_bucket.setdefault(bucket, [0, 0])[int(is_test)] += n
        buckets = []
        for bucket, (train, test) in sorted(per_bucket.items()):
            kv, prefix, queue = spec.ranges(bucket)
            buckets.append(
                BucketCount(
                    bucket=bucket,
                    kv_range=kv,
                    prefix_range=prefix,
                    queue_range=queue,
                    train=train,
                    test=test,
                )
            )
        targets[target.label] = TargetStats(
            train=sum(b.train for b in buckets), test=sum(b.test for b in buckets), buckets=buckets
        )
    return WindowStats(pool=pool, cap=spec.cap, targets=targets)


def trim_all_windows(session: Session, cap: int) -> int:
    """Trim every (pool, target) window; used by the periodic trimmer."""
    pools = session.scalars(select(Sample.pool_id).distinct()).all()
    return sum(trim_window(session, p, t, cap) for p in pools for t in Target)
