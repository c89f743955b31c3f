"""Ingestion into the stratified window, trimming it back to the cap, and its statistics.

Services never commit: the caller owns the unit of work.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

from sqlalchemy import delete, func, insert, select
from sqlalchemy.orm import Session

from backend.predictor.features import POD_ROLE_CODES, is_known_role, pod_role_code
from backend.predictor.window import WindowSpec
from backend.samples import repository
from backend.samples.models import (
    SAMPLE_COLUMNS,
    WINDOW_FEATURES,
    Sample,
    TargetCode,
    WindowFlush,
)
from backend.samples.schemas import (
    BucketCount,
    RoleCount,
    TargetStats,
    TrainingEntry,
    WindowStats,
)

Row = tuple[Any, ...]

# Binary COPY: psycopg's C encoder with declared types does in about 1 ms what the text format's
# per-value adaptation did in 10-14 ms for 2,000 rows, and PostgreSQL parses it faster too.
_COPY_SQL = f"COPY samples ({', '.join(SAMPLE_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COLUMN_OIDS_SQL = (
    "SELECT attname, atttypid FROM pg_attribute "
    "WHERE attrelid = 'samples'::regclass AND attnum > 0 AND NOT attisdropped"
)
_column_oids: list[int] = []  # the live table's column types, read once per process


@dataclass(frozen=True)
class Ingested:
    accepted: int
    ttft_rows: int
    tpot_rows: int
    unlabelled: int


# Stored features in WINDOW_FEATURES order, around pod_type (stored as its integer code).
_before_pod_type = attrgetter(*WINDOW_FEATURES[: WINDOW_FEATURES.index("pod_type")])
_after_pod_type = attrgetter(*WINDOW_FEATURES[WINDOW_FEATURES.index("pod_type") + 1 :], "pod_class")
_KV, _PREFIX, _WAITING = (
    WINDOW_FEATURES.index(f)
    for f in ("kv_cache_percentage", "prefix_cache_score", "num_request_waiting")
)


def build_rows(
    pool_id: int,
    entries: Sequence[TrainingEntry],
    spec: WindowSpec,
    test_fraction: float,
    rng: random.Random,
) -> tuple[list[Row], Ingested]:
    """Rows in SAMPLE_COLUMNS order, and what the caller answers; no database work.

    Runs for every ingested entry (tens of thousands a second), hence the C-level getters and
    the locals instead of attribute lookups in the loop.
    """
    now = datetime.now(UTC)
    rows: list[Row] = []
    n_ttft = n_tpot = unlabelled = 0
    bucket_of, draw, codes = spec.bucket, rng.random, POD_ROLE_CODES
    ttft, tpot = int(TargetCode.TTFT), int(TargetCode.TPOT)
    for e in entries:
        role = e.pod_type or None
        code = codes.get(role) if role else 0
        if code is None:  # an llm-d role spelt otherwise, or one nobody knows yet
            code = pod_role_code(role)
        features = (*_before_pod_type(e), code, *_after_pod_type(e))
        bucket = bucket_of(features[_KV], features[_PREFIX], features[_WAITING])
        observed = e.timestamp or now
        group = e.prefix_group
        # The held-out flag is drawn once, at arrival: a sample never changes sets.
        if e.actual_ttft_ms > 0:
            test = draw() < test_fraction
            label = (e.actual_ttft_ms, e.predicted_ttft_ms, e.pod, observed, role, group)
            rows.append((pool_id, ttft, bucket, test, *features, *label))
            n_ttft += 1
        if e.actual_tpot_ms > 0:
            test = draw() < test_fraction
            label = (e.actual_tpot_ms, e.predicted_tpot_ms, e.pod, observed, role, group)
            rows.append((pool_id, tpot, bucket, test, *features, *label))
            n_tpot += 1
        if e.actual_ttft_ms <= 0 and e.actual_tpot_ms <= 0:
            unlabelled += 1
    return rows, Ingested(len(entries), n_ttft, n_tpot, unlabelled)


def write_rows(session: Session, rows: Sequence[Row]) -> None:
    """Append rows inside the session's transaction: COPY on PostgreSQL, executemany elsewhere."""
    if not rows:
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        raw = connection.connection.driver_connection
        with raw.cursor() as cursor:  # type: ignore[union-attr]
            if not _column_oids:
                # Asked of the table itself, so that a migration changing a column's type
                # cannot leave a stale list here (binary COPY needs the exact types).
                oids = dict(cursor.execute(_COLUMN_OIDS_SQL).fetchall())
                _column_oids[:] = [oids[c] for c in SAMPLE_COLUMNS]
            with cursor.copy(_COPY_SQL) as copy:
                copy.set_types(_column_oids)
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
    rows, done = build_rows(pool_id, entries, spec, test_fraction, rng)
    write_rows(session, rows)
    return done


def trim_window(session: Session, pool_id: int, target: TargetCode, cap: int) -> int:
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


def window_stats(session: Session, pool: str, pool_id: int, spec: WindowSpec) -> WindowStats:
    counts = repository.bucket_counts(session, pool_id)
    targets: dict[str, TargetStats] = {}
    for target in TargetCode:
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
    roles = role_counts(session, pool_id)
    return WindowStats(
        pool=pool,
        cap=spec.cap,
        targets=targets,
        pod_types=roles,
        unknown_pod_types=[r.pod_type for r in roles if not r.known],
    )


def role_counts(session: Session, pool_id: int) -> list[RoleCount]:
    """Rows stored per raw pod_type value, most first (an unknown role shows up here)."""
    return [
        RoleCount(pod_type=role or "", samples=n, known=is_known_role(role))
        for role, n in repository.role_counts(session, pool_id)
    ]


def trim_all_windows(session: Session, cap: int) -> int:
    """Trim every (pool, target) window; used by the periodic trimmer."""
    pools = session.scalars(select(Sample.pool_id).distinct()).all()
    return sum(trim_window(session, p, t, cap) for p in pools for t in TargetCode)


@dataclass(frozen=True)
class Flushed:
    """Rows a window flush removed, per target and set, and its audit record's id."""

    removed: dict[tuple[TargetCode, bool], int]
    """(target, is_test) -> rows deleted."""
    record_id: int

    def of(self, target: TargetCode) -> int:
        return self.removed[(target, False)] + self.removed[(target, True)]


def flush_window(
    session: Session,
    pool_id: int,
    by: str,
    reason: str,
    *,
    training: bool = True,
    test: bool = True,
    older_than: datetime | None = None,
) -> Flushed:
    """Empty a pool's window (or only its training or held-out rows, or only rows observed
    before `older_than`) and record who did it, when, why and how much, like a policy change.
    The active models stay: they keep serving until the window refills and a candidate wins."""
    removed: dict[tuple[TargetCode, bool], int] = {}
    for target in TargetCode:
        for is_test, wanted in ((False, training), (True, test)):
            where = [
                Sample.pool_id == pool_id,
                Sample.target == int(target),
                Sample.is_test.is_(is_test),
            ]
            if older_than is not None:
                where.append(Sample.observed_at < older_than)
            n = 0
            if wanted:
                result = session.execute(delete(Sample).where(*where))
                n = int(result.rowcount)  # type: ignore[attr-defined]
            removed[(target, is_test)] = n
    record = WindowFlush(
        pool_id=pool_id,
        flushed_by=by[:100],
        reason=reason[:500],
        older_than=older_than,
        ttft_removed=removed[(TargetCode.TTFT, False)] + removed[(TargetCode.TTFT, True)],
        tpot_removed=removed[(TargetCode.TPOT, False)] + removed[(TargetCode.TPOT, True)],
    )
    session.add(record)
    session.flush()
    return Flushed(removed, record.id)
