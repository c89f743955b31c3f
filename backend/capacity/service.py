"""Saturation of every pool, refreshed on a timer and served from memory.

Every API process serves one ``CapacityMonitor``, computed in its helper process
(``backend/capacity/helper.py``, the default) or in a background thread: each tick reads the
samples added since the last one, updates each pool's pod gauges and request profile, and
recomputes the pool's saturation with the models served and the pool's policy, through the
scheduling library that ``/v1/schedule`` uses: a mix (``present_weight``) of the level on the
pods as they stand and the next interval's (the pool's arrivals of the last
``arrival_window_s`` replayed onto the pods). Requests and scrapes read the last result; they
never compute. A tick costs two indexed range scans (the pods' newest gauges, the pools'
request counts) plus a few batch predictions per pool.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.capacity.desired import read_all
from backend.capacity.models import DesiredReplicas
from backend.capacity.signals import PoolSignals, apply
from backend.pools.models import Pool
from backend.predictor.features import POD_TYPE_CODES
from backend.predictor.serving import ModelsNotReady, ModelStore, meet_both, predict_both
from backend.routing.service import PoolPolicy
from backend.samples import repository
from backend.samples.models import WINDOW_FEATURES, TargetCode
from backend.scheduling.record import LevelRecord, corrected
from backend.scheduling.saturation import (
    Saturation,
    role_replicas,
    saturation,
    saturation_replicas,
    scaled,
)
from backend.scheduling.types import Candidate, FloatArray
from backend.settings import CapacitySettings

log = logging.getLogger("headroom.capacity")

# Status of a pool's report: why there is no level, when there is none.
OK, NO_MODEL, NO_PODS, NO_TRAFFIC, NO_SLO = (
    "ok",
    "no_model",
    "no_fresh_pods",
    "no_traffic",
    "no_slo",
)


@dataclass(frozen=True)
class PoolReport:
    pool: str
    status: str
    computed_at: datetime
    saturation: Saturation | None
    fresh_pods: int
    stale_pods: tuple[str, ...]
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    policy_version: int | None
    saturation_replicas: int | None = None
    """Pods the saturation level asks for (``saturation_replicas``): the fresh pods, plus the
    share of representative requests missing because of load beyond the policy's budget
    (1 - target_slo_attainment), or one fewer where that much work on one pod fewer keeps it.
    From the present level, as the simulated scaler validated it (docs/capacity.md)."""
    role_replicas: dict[str, int] | None = None
    """A P/D pool's count per role (``role_replicas``: each role's pods alone scaled), by role
    name; None for a pool of one role."""


# Candidates carry every wire feature but the encoder ones (0 for text-only pools).
_ENCODER = ("encoder_input_size", "encoder_matched_size")
_NUMERIC = (*(f for f in WINDOW_FEATURES if f != "pod_type" and f not in _ENCODER), *_ENCODER)
_NUMERIC_ON_CANDIDATE = _NUMERIC[:-2]
_getter = attrgetter(*_NUMERIC_ON_CANDIDATE)


def _numeric(row: Candidate) -> tuple[float, ...]:
    return (*_getter(row), 0.0, 0.0)


def columns(rows: Sequence[Candidate]) -> dict[str, Any]:
    """Candidates -> the column arrays the served models take (as the wire rows give them)."""
    n = len(rows)
    # One C-level getter per row and one conversion, as prediction.schemas.columns does.
    matrix = np.array([_numeric(r) for r in rows], dtype=np.float64).reshape(n, len(_NUMERIC))
    cols: dict[str, Any] = {name: matrix[:, j] for j, name in enumerate(_NUMERIC)}
    cols["pod_type"] = np.fromiter((POD_TYPE_CODES[r.role] for r in rows), np.float64, count=n)
    cols["pod_class"] = np.array([r.pod_class for r in rows], dtype=object)
    return cols


def spread(items: list[Any], n: int) -> list[Any]:
    """At most ``n`` items evenly spaced over the profile (newest included)."""
    if len(items) <= n:
        return items
    picks = np.linspace(0, len(items) - 1, n).round().astype(int)
    return [items[i] for i in picks]


class CapacityMonitor:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        store: ModelStore,
        policy: Callable[[int], PoolPolicy],
        settings: CapacitySettings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._sessions = sessions
        self._store = store
        self._policy = policy
        self._settings = settings
        self._clock = clock
        self._signals: dict[int, PoolSignals] = {}
        # Per pool: its level's record, and the policy version it was kept under (new SLOs
        # make the old levels' misses another question: the record starts again).
        self._records: dict[int, tuple[int | None, LevelRecord]] = {}
        self._after: int | None = None
        self._reports: dict[str, PoolReport] = {}
        self._desired: dict[str, DesiredReplicas] = {}
        # Per pool: (time, level or None, pods the level asks for or None) a tick, newest last,
        # for the Overview's charts.
        self._history: dict[str, deque[tuple[datetime, float | None, int | None]]] = {}
        self._lock = threading.Lock()  # one computation at a time; readers never take it
        self._publish_lock = threading.Lock()  # and one publication

    def report(self, pool: str) -> PoolReport | None:
        return self._reports.get(pool)

    def reports(self) -> Mapping[str, PoolReport]:
        return self._reports

    def desired(self, pool: str) -> DesiredReplicas | None:
        """The pool's desired replicas as the worker last stored it (read on every tick)."""
        return self._desired.get(pool)

    def all_desired(self) -> Mapping[str, DesiredReplicas]:
        return self._desired

    def history(self, pool: str) -> list[tuple[datetime, float | None]]:
        """The pool's level at each recent tick, oldest first (None where it had no level)."""
        return [(at, level) for at, level, _ in self._history.get(pool, ())]

    def count_history(self, pool: str) -> list[tuple[datetime, float | None]]:
        """The pods the level asked for at each recent tick, oldest first (None: no count)."""
        return [
            (at, None if count is None else float(count))
            for at, _, count in self._history.get(pool, ())
        ]

    def refresh(self) -> int:
        """One tick in this process: compute every pool's report and serve it; returns rows
        read."""
        reports, now, read = self.compute()
        self.publish(reports, now)
        return read

    def compute(self) -> tuple[dict[str, PoolReport], datetime, int]:
        """Read the new samples and recompute every pool: (reports by pool name, when, rows
        read). Serves nothing: ``refresh`` here, or the API process a helper sends them to."""
        with self._lock:
            read = self._read()
            names = self._pool_names()
            now = self._clock()
            reports = {
                names[pid]: self._compute(names[pid], pid, signals, now)
                for pid, signals in self._signals.items()
                if pid in names
            }
            return reports, now, read

    def publish(self, reports: Mapping[str, PoolReport], now: datetime) -> None:
        """Serve a tick's reports with each pool's desired replicas as the worker last stored
        them, and add the tick to the pools' history."""
        with self._sessions() as session:
            desired = read_all(session)
        names = self._pool_names()
        with self._publish_lock:
            self._reports = dict(reports)  # one assignment: readers see the old or the new set
            self._desired = {names[pid]: row for pid, row in desired.items() if pid in names}
            for name, report in reports.items():
                points = self._history.get(name)
                if points is None:
                    points = deque(maxlen=self._settings.history_points)
                    self._history[name] = points
                level = report.saturation.level if report.saturation else None
                points.append((now, level, report.saturation_replicas))
            for gone in self._history.keys() - reports.keys():
                del self._history[gone]  # a pool deleted or renamed

    def _read(self) -> int:
        """The samples since the last tick: each pod's newest (its gauges now) and a sample of
        the newest requests (the profile). Bounded by the pod count plus `profile_rows`, not
        by the ingestion rate, so a busy pool costs a tick no more than a quiet one."""
        s = self._settings
        with self._sessions() as session:
            top = repository.newest_id(session)
            if self._after is None:
                self._after = max(0, top - s.start_back_rows)
            if top <= self._after:
                return 0
            pods = repository.latest_per_pod(session, self._after, top)
            recent = repository.newest_after(session, self._after, top, s.profile_rows)
            read = Counter(r.pool_id for r in recent if r.target == TargetCode.TTFT)
            # A busy tick's read is cut to the newest rows: each arrival read then stands for
            # the pool's TTFT rows it could not read too, so that the replayed rate is the real
            # one. A read that was not cut holds every row: nothing to count again.
            cut = len(recent) >= s.profile_rows
            requests = repository.ttft_counts(session, self._after, top) if cut else read
        apply(self._signals, pods, s.profile_size, profile=False)
        for pool_id, count in requests.items():
            pool = self._signals.setdefault(pool_id, PoolSignals(s.profile_size))
            pool.arrival_weight = count / read[pool_id] if read[pool_id] else 1.0
        apply(self._signals, recent, s.profile_size, gauges=False)
        self._after = top
        return len(pods) + len(recent)

    def _pool_names(self) -> dict[int, str]:
        with self._sessions() as session:
            return {pid: name for pid, name in session.execute(select(Pool.id, Pool.name))}

    def _compute(self, pool: str, pool_id: int, signals: PoolSignals, now: datetime) -> PoolReport:
        fresh, stale = signals.fresh_pods(now, self._settings.stale_after_s)
        policy = self._policy(pool_id)
        ttft_slo, tpot_slo = policy.spec.default_ttft_slo_ms, policy.spec.default_tpot_slo_ms

        def report(
            status: str,
            sat: Saturation | None = None,
            replicas: int | None = None,
            by_role: dict[str, int] | None = None,
        ) -> PoolReport:
            return PoolReport(
                pool,
                status,
                now,
                sat,
                len(fresh),
                tuple(stale),
                ttft_slo,
                tpot_slo,
                policy.version,
                replicas,
                by_role,
            )

        if ttft_slo is None and tpot_slo is None:
            return report(NO_SLO)  # nothing to miss: a level would always read 0
        if not fresh:
            return report(NO_PODS)
        if not signals.requests:
            return report(NO_TRAFFIC)
        if self._store.get(pool, "ttft") is None:
            return report(NO_MODEL)
        reps = spread(list(signals.requests), self._settings.representatives)

        last: list[tuple[Sequence[Candidate], dict[str, Any]]] = []

        def cols(rows: Sequence[Candidate]) -> dict[str, Any]:
            # The chance of meeting is asked for the rows just predicted: convert them once
            # (the list is held, so its identity cannot be reused meanwhile).
            if not last or last[0][0] is not rows:
                last[:] = [(rows, columns(rows))]
            return last[0][1]

        def predict(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
            p = predict_both(self._store, pool, cols(rows))
            return p.ttft_ms, p.tpot_ms

        def meet(
            rows: Sequence[Candidate],
            ttft: FloatArray,
            tpot: FloatArray,
            ttft_slo_ms: float | None,
            tpot_slo_ms: float | None,
        ) -> FloatArray:
            return meet_both(self._store, pool, cols(rows), ttft, tpot, ttft_slo_ms, tpot_slo_ms)

        # Nothing to replay with no window or all the weight on the present level.
        window, weight = self._settings.arrival_window_s, self._settings.present_weight
        arrivals = signals.recent_arrivals(now, window) if window > 0 and weight < 1 else None
        pods = [p.candidate() for p in fresh]
        # The pool's mean answer length: how long a P/D decode pod's queue holds a first token
        # (the policy's expectation where no sample said one, for every level of the tick alike).
        level_of = functools.partial(
            saturation,
            requests=reps,
            policy=policy.policy,
            ttft_slo_ms=ttft_slo,
            tpot_slo_ms=tpot_slo,
            predict=predict,
            meet_probability=meet,
            output_tokens=signals.mean_output_tokens(),
        )
        try:
            sat = level_of(pods, arrivals=arrivals, present_weight=weight)
            present = sat.present_level

            def level_at(factor: float, role: str | None = None) -> float:
                """The present level with every pod's load (or only ``role``'s pods') scaled
                by ``factor`` (1: the tick's own, already computed)."""
                if factor == 1.0 and present is not None:
                    return present
                rows = [scaled(p, factor) if role in (None, p.role) else p for p in pods]
                return level_of(rows).level

            # The pods the level asks for, from the present level as the simulated scaler was
            # measured on it (docs/capacity.md, "Both signals"); a P/D pool's per role, and
            # its total their sum: its pods are two Deployments, each scaled on its own count,
            # and a pooled count (every pod's load scaled alike) could read 3 beside 1 + 1.
            budget = 1.0 - policy.spec.target_slo_attainment
            by_role = role_replicas(level_at, [p.role for p in pods], budget)
            replicas = (
                saturation_replicas(level_at, len(pods), len(pods), budget)
                if by_role is None
                else sum(by_role.values())
            )
        except ModelsNotReady:  # the model went away between the check and the call
            return report(NO_MODEL)
        recorded = self._recorded(pool_id, policy.version, signals, now, sat, ttft_slo, tpot_slo)
        return report(OK, recorded, replicas, by_role)

    def _recorded(
        self,
        pool_id: int,
        version: int | None,
        signals: PoolSignals,
        now: datetime,
        sat: Saturation,
        ttft_slo_ms: float | None,
        tpot_slo_ms: float | None,
    ) -> Saturation:
        """The tick's level kept in the pool's record, and corrected by it (with
        ``record_correction``): its bias over the last ``record_horizon_s``."""
        s = self._settings
        if not s.record_correction:
            return sat
        kept = self._records.get(pool_id)
        if kept is None or kept[0] != version:
            record = LevelRecord(s.record_horizon_s, s.record_delay_s, s.record_min_requests)
            self._records[pool_id] = (version, record)
        else:
            record = kept[1]
        at = now.timestamp()
        bias = record.bias(at, signals.outcomes(), ttft_slo_ms, tpot_slo_ms)
        record.add(at, sat)
        return corrected(sat, bias)
