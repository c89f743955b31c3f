"""Every read of the samples window: the one place that runs SQL against `samples` for reading.

Used by the trainer (backend/registry), the console's views (backend/ui/views.py) and the
samples service (stats). Writes (ingestion, trimming, flushing) stay in backend/samples/service.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.predictor.rows import WindowRows
from backend.samples.models import WINDOW_FEATURES, Sample, TargetCode, WindowFlush
from backend.samples.schemas import POD_TYPE_NAMES
from backend.sim.pairing import DISPATCH_LOAD

assert POD_TYPE_NAMES[0] == ""  # pod_type is stored as its code, which is what features expect

_WINDOW_COLUMNS = (*WINDOW_FEATURES, "latency_ms", "is_test", "id", "predicted_ms", "pod_class")


@dataclass(frozen=True)
class Window:
    """A (pool, target) window as columns; `ids` give the arrival order."""

    cols: dict[str, npt.NDArray[Any]]
    labels: npt.NDArray[np.float64]
    is_test: npt.NDArray[np.bool_]
    ids: npt.NDArray[np.int64]
    predicted: npt.NDArray[np.float64]
    """The router's prediction for each row; NaN where it sent none."""

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])

    @property
    def max_id(self) -> int:
        return int(self.ids.max()) if self.ids.size else 0

    def rows(self) -> WindowRows:
        return WindowRows(self.cols, self.labels, self.is_test, self.ids, self.predicted)


def _fetch(session: Session, sql: str) -> list[tuple[Any, ...]]:
    """Rows through the raw DB-API cursor: plain tuples straight into numpy are several times
    faster than building SQLAlchemy rows for 100,000 samples. Every statement is of this
    module's own making, with only integers formatted in (which also sidesteps the drivers'
    paramstyles)."""
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(sql)
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _window(session: Session, pool_id: int, target: TargetCode, where: str = "") -> Window:
    rows = _fetch(
        session,
        f"SELECT {', '.join(_WINDOW_COLUMNS)} FROM samples WHERE pool_id = {int(pool_id)} "
        f"AND target = {int(target)}{where}",
    )
    n = len(WINDOW_FEATURES)
    # The pod class is the only text column, and predicted_ms may be NULL: split both off
    # before the numeric conversion.
    classes = np.array([r[-1] for r in rows], dtype=object)
    predicted = np.array([np.nan if r[-2] is None else r[-2] for r in rows], dtype=np.float64)
    data = np.array([r[: n + 3] for r in rows], dtype=np.float64).reshape(len(rows), n + 3)
    cols: dict[str, npt.NDArray[Any]] = {name: data[:, i] for i, name in enumerate(WINDOW_FEATURES)}
    cols["pod_class"] = classes
    return Window(
        cols, data[:, n], data[:, n + 1].astype(bool), data[:, n + 2].astype(np.int64), predicted
    )


def read_window(session: Session, pool_id: int, target: TargetCode) -> Window:
    """Every row of a (pool, target) window (call after trimming)."""
    return _window(session, pool_id, target)


def read_held_out(session: Session, pool_id: int, target: TargetCode, one_in: int = 1) -> Window:
    """The held-out rows of a window; with `one_in` > 1 about one in that many, picked by a
    multiplicative (Fibonacci) hash of the id. The id is in the window's index, so the rows
    left out are never read. A plain `id % n` would not do: consecutive ids alternate between
    targets (and pools), so it could pick all of one target and none of the other."""
    keep = ""
    if one_in > 1:
        keep = f" AND ((id % 65536) * 40503) % 65536 < {-(-65536 // int(one_in))}"
    return _window(session, pool_id, target, f" AND is_test{keep}")


def max_id(session: Session, pool_id: int, target: TargetCode | None = None) -> int:
    """The newest sample id of a pool (of one target), 0 when there is none."""
    query = select(func.max(Sample.id)).where(Sample.pool_id == pool_id)
    if target is not None:
        query = query.where(Sample.target == int(target))
    return int(session.scalar(query) or 0)


def bucket_counts(session: Session, pool_id: int) -> dict[tuple[int, int, bool], int]:
    """(target, bucket, is_test) -> rows stored."""
    result = session.execute(
        select(Sample.target, Sample.bucket, Sample.is_test, func.count())
        .where(Sample.pool_id == pool_id)
        .group_by(Sample.target, Sample.bucket, Sample.is_test)
    )
    return {(t, b, bool(s)): n for t, b, s, n in result}


def window_sizes(session: Session) -> list[tuple[int, int, int]]:
    """(pool_id, target, rows stored) for every window."""
    result = session.execute(
        select(Sample.pool_id, Sample.target, func.count()).group_by(Sample.pool_id, Sample.target)
    )
    return [(p, t, n) for p, t, n in result]


def role_counts(session: Session, pool_id: int) -> list[tuple[str | None, int]]:
    """(raw pod_type value, rows stored), most first."""
    result = session.execute(
        select(Sample.pod_role, func.count())
        .where(Sample.pool_id == pool_id)
        .group_by(Sample.pod_role)
        .order_by(func.count().desc(), Sample.pod_role)
    )
    return [(role, n) for role, n in result]


# What the capacity monitor reads of each new sample: the gauges, the request's shape, and
# where and when it was seen.
_SIGNAL_COLUMNS = (
    Sample.id,
    Sample.pool_id,
    Sample.target,
    Sample.pod,
    Sample.observed_at,
    Sample.kv_cache_percentage,
    Sample.num_request_waiting,
    Sample.num_request_running,
    Sample.prefill_tokens_in_flight,
    Sample.decode_tokens_in_flight,
    Sample.ms_since_last_token,
    Sample.oldest_prefill_wait_ms,
    Sample.ms_since_last_first_token,
    Sample.pod_type,
    Sample.pod_class,
    Sample.input_token_length,
    Sample.prefix_cache_score,
    Sample.num_tokens_generated,
    Sample.latency_ms,
)


def latest_per_pod(session: Session, after_id: int, upto_id: int) -> list[Any]:
    """The newest sample of each (pool, pod) among ids in (after_id, upto_id], oldest first:
    the capacity monitor's view of every pod's gauges. The database aggregates, so a tick costs
    one row per pod however many samples arrived."""
    newest = (
        select(func.max(Sample.id))
        .where(Sample.id > after_id, Sample.id <= upto_id, Sample.pod.is_not(None))
        .group_by(Sample.pool_id, Sample.pod)
    )
    query = select(*_SIGNAL_COLUMNS).where(Sample.id.in_(newest)).order_by(Sample.id)
    return list(session.execute(query).all())


def ttft_counts(session: Session, after_id: int, upto_id: int) -> dict[int, int]:
    """Per pool: the TTFT samples (one per request) among ids in (after_id, upto_id], counted
    by the database over the same id range as ``latest_per_pod``."""
    query = (
        select(Sample.pool_id, func.count())
        .where(Sample.id > after_id, Sample.id <= upto_id, Sample.target == TargetCode.TTFT)
        .group_by(Sample.pool_id)
    )
    return {int(pool_id): int(n) for pool_id, n in session.execute(query)}


def newest_after(session: Session, after_id: int, upto_id: int, limit: int) -> list[Any]:
    """At most the newest ``limit`` samples among ids in (after_id, upto_id], oldest first: the
    capacity monitor's sample of recent requests."""
    query = (
        select(*_SIGNAL_COLUMNS)
        .where(Sample.id > after_id, Sample.id <= upto_id)
        .order_by(Sample.id.desc())
        .limit(limit)
    )
    return list(reversed(session.execute(query).all()))


def newest_id(session: Session) -> int:
    """The newest sample id of any pool (0 for an empty table)."""
    return int(session.scalar(select(func.max(Sample.id))) or 0)


def newest_rows(session: Session, limit: int) -> npt.NDArray[np.float64]:
    """The newest `limit` samples of all pools, newest first, as (id, pool_id, target,
    latency_ms, predicted_ms) with NaN where no prediction came back."""
    rows = _fetch(
        session,
        "SELECT id, pool_id, target, latency_ms, COALESCE(predicted_ms, -1) FROM samples "
        f"ORDER BY id DESC LIMIT {int(limit)}",
    )
    data = np.array(rows, dtype=np.float64).reshape(len(rows), 5)
    data[data[:, 4] < 0, 4] = np.nan
    return data


def arrivals_since(session: Session, cutoff: datetime, limit: int) -> dict[int, int]:
    """Per pool: how many of the newest `limit` samples were observed at or after `cutoff`."""
    times = (
        select(Sample.pool_id, Sample.observed_at)
        .order_by(Sample.id.desc())
        .limit(limit)
        .subquery()
    )
    return {
        int(pool_id): int(n)
        for pool_id, n in session.execute(
            select(times.c.pool_id, func.count())
            .where(times.c.observed_at >= cutoff)
            .group_by(times.c.pool_id)
        )
    }


def observed_at(session: Session, sample_id: int) -> datetime | None:
    return session.scalar(select(Sample.observed_at).where(Sample.id == sample_id))


def flushes(session: Session, pool_id: int, limit: int = 20) -> list[WindowFlush]:
    """The audit trail of a pool's window flushes, newest first."""
    return list(
        session.scalars(
            select(WindowFlush)
            .where(WindowFlush.pool_id == pool_id)
            .order_by(WindowFlush.id.desc())
            .limit(limit)
        )
    )


RECENT_COLUMNS = (
    "target",
    "observed_at",
    "latency_ms",
    "input_token_length",
    "prefix_cache_score",
    "pod",
    "pod_class",
    "prefix_group",
    *DISPATCH_LOAD,
    "pod_type",
)
"""What `recent_samples` returns per row: enough to rebuild the requests (backend/sim/
fromsamples.py) and to match a request's TTFT and TPOT rows (backend/sim/pairing.py)."""


def recent_samples(
    session: Session, pool_id: int, since: datetime, limit: int
) -> list[tuple[Any, ...]]:
    """A pool's samples observed at or after `since`, at most the newest `limit`, oldest
    first, as `RECENT_COLUMNS` tuples."""
    cols = [getattr(Sample, c) for c in RECENT_COLUMNS]
    rows = session.execute(
        select(*cols)
        .where(Sample.pool_id == pool_id, Sample.observed_at >= since)
        .order_by(Sample.id.desc())
        .limit(limit)
    ).all()
    return [tuple(r) for r in reversed(rows)]


def predicted_rows(
    session: Session, pool_id: int, target: TargetCode, limit: int
) -> npt.NDArray[np.float64]:
    """The newest `limit` samples of (pool, target) that carry the router's prediction, as
    (observed_at epoch seconds, latency_ms, predicted_ms, running + waiting), newest first."""
    result = session.execute(
        select(
            Sample.observed_at,
            Sample.latency_ms,
            Sample.predicted_ms,
            Sample.num_request_running + Sample.num_request_waiting,
        )
        .where(
            Sample.pool_id == pool_id,
            Sample.target == int(target),
            Sample.predicted_ms.is_not(None),
        )
        .order_by(Sample.id.desc())
        .limit(limit)
    )
    rows = [(at.timestamp(), latency, predicted, load) for at, latency, predicted, load in result]
    return np.array(rows, dtype=np.float64).reshape(len(rows), 4)


def count_recent(session: Session, pool_id: int, since: datetime, target: TargetCode) -> int:
    """How many of a pool's `target` samples were observed at or after `since`: the check
    before reading them (`recent_samples`), without moving the rows."""
    return int(
        session.scalar(
            select(func.count()).where(
                Sample.pool_id == pool_id,
                Sample.target == int(target),
                Sample.observed_at >= since,
            )
        )
        or 0
    )
