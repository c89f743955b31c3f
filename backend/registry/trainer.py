"""The retraining loop: which windows are due, and training one of them end to end.

The same `Trainer` runs inside the API process (embedded mode, a background thread) and inside
Celery workers (production), with in-process or Redis locks and notifications respectively.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from backend.db import unit_of_work
from backend.pools.models import Pool
from backend.predictor import gate
from backend.predictor.calibration import LIVE_ROWS, MIN_LIVE_ROWS, column_load
from backend.predictor.features import feature_names
from backend.predictor.regressors import TrainParams
from backend.registry import service
from backend.registry.failures import FailureCounter, LocalFailures
from backend.registry.locks import Locks
from backend.registry.notify import Notifier
from backend.samples import repository as samples_repo
from backend.samples.models import TargetCode
from backend.samples.service import trim_window
from backend.settings import Settings

log = logging.getLogger("headroom.trainer")

Key = tuple[int, TargetCode]


@dataclass(frozen=True)
class Outcome:
    pool_id: int
    target: TargetCode
    status: str  # activated | rejected | skipped
    reason: str
    version_id: int | None = None


@dataclass
class Trainer:
    sessions: sessionmaker[Session]
    settings: Settings
    locks: Locks
    notifier: Notifier
    params: TrainParams | None = None
    failures: FailureCounter = field(default_factory=LocalFailures)
    # Targets whose active model was already stored when this process first looked: upstream
    # waits for more samples before replacing a model it loaded at start than a fresh one.
    _loaded_at_start: set[Key] = field(default_factory=set)
    _seen: set[Key] = field(default_factory=set)

    def due(self) -> list[Key]:
        """(pool, target) pairs with samples newer than the newest model trained on them."""
        out: list[Key] = []
        with self.sessions() as session:
            pool_ids = session.scalars(select(Pool.id).order_by(Pool.id)).all()
            for pool_id in pool_ids:
                for target in TargetCode:
                    key = (pool_id, target)
                    if key not in self._seen:
                        active = service.active_version(session, pool_id, target)
                        self._first_look(key, active is not None)
                    newest = samples_repo.max_id(session, pool_id, target)
                    if newest > service.last_trained_max_id(session, pool_id, target):
                        out.append(key)
        return out

    def _first_look(self, key: Key, has_active: bool) -> None:
        if key not in self._seen:
            self._seen.add(key)
            if has_active:
                self._loaded_at_start.add(key)

    def min_samples(self, key: Key) -> int:
        t = self.settings.training
        return t.min_samples_loaded if key in self._loaded_at_start else t.min_samples_fresh

    def train(self, pool_id: int, target: TargetCode) -> Outcome:
        key = (pool_id, target)
        with self.locks.hold(f"train:{pool_id}:{target.label}") as acquired:
            if not acquired:
                return Outcome(pool_id, target, "skipped", "another trainer holds the lock")
            try:
                return self._train_locked(key)
            except Exception:
                self.failures.incr(f"{pool_id}:{target.label}")
                raise

    def _train_locked(self, key: Key) -> Outcome:
        pool_id, target = key
        t = self.settings.training
        started = datetime.now(UTC)
        with unit_of_work(self.sessions) as session:
            trim_window(session, pool_id, target, self.settings.window.cap)
            window = samples_repo.read_window(session, pool_id, target)
            trained_through = service.last_trained_max_id(session, pool_id, target)
            if window.max_id <= trained_through:
                return Outcome(pool_id, target, "skipped", "no new samples")
            previous = service.shift_of(service.latest_version(session, pool_id, target))
            active = service.active_version(session, pool_id, target)
            self._first_look(key, active is not None)
            active_model = (
                service.load_version_model(session, active.id)
                if active is not None
                and (active.kind, active.objective) == (t.model_kind, t.objective)
                else None
            )
            served_by = None
            if target == TargetCode.TTFT:
                # Which correction each TTFT sample's prediction was served with: TTFT samples
                # arrive within a TTFT of their prediction, so arrival order says which version
                # routed them. (TPOT samples arrive when the decode ends, versions later; the
                # calibration uses the active version's own predictions for them.)
                since = live_since(window.predicted, window.ids)
                if since is not None:
                    served_by = service.served_calibrations(session, pool_id, target, since)
        # A model of another kind, objective or feature set cannot be scored like for like:
        # the gate then treats the target as having no comparable model.
        if active_model is not None and active_model.feature_names != feature_names(
            target.label, t.model_kind
        ):
            active_model = None
        usable = int((window.labels > 0).sum())
        if usable < self.min_samples(key):
            return Outcome(
                pool_id, target, "skipped", f"{usable} samples < {self.min_samples(key)} needed"
            )
        comparable = None
        if active is not None and active_model is not None:
            mape = active.metrics.get("mape") if active.metrics else None
            comparable = gate.Active(
                active_model,
                active.window_max_id,
                float(mape) if mape is not None else None,
                active.trained_from_id,
            )
        rows = window.rows()
        if served_by is not None:
            rows = dataclasses.replace(
                rows,
                served_factor=gate.served_factors(window.ids, column_load(window.cols), served_by),
            )
        # No session is held while fitting: training may take seconds.
        try:
            rnd = gate.train_round(
                target.label,
                rows,
                comparable,
                trained_through,
                previous,
                started.timestamp(),
                gate.GateRules.from_settings(t),
                gate.ShiftRules.from_settings(t),
                kind=t.model_kind,
                objective=t.objective,
                quantile=t.quantile,
                params=self.params,
            )
        except ValueError as exc:
            # e.g. every ordinary row held out while outliers wait: nothing to store.
            return Outcome(pool_id, target, "skipped", str(exc))
        decision = rnd.decision
        config = {"kind": t.model_kind, "objective": t.objective, "quantile": t.quantile}
        with unit_of_work(self.sessions) as session:
            version = service.store_version(
                session, pool_id, target, rnd, window.max_id, started, config
            )
            version_id = version.id
        # Published only after the commit, so every listener finds the row it is told about.
        if decision.activate:
            self._loaded_at_start.discard(key)
            self.notifier.publish(
                {"pool_id": pool_id, "target": target.label, "version_id": version_id}
            )
        status = "activated" if decision.activate else "rejected"
        log.info(
            "pool %s %s: version %s %s (%s)",
            pool_id,
            target.label,
            version_id,
            status,
            decision.reason,
        )
        return Outcome(pool_id, target, status, decision.reason, version_id)

    def run_once(self) -> list[Outcome]:
        """Train every due (pool, target); a failure of one does not stop the others."""
        outcomes = []
        for pool_id, target in self.due():
            try:
                outcomes.append(self.train(pool_id, target))
            except Exception:
                log.exception(
                    "training pool %s %s failed; the active model stays", pool_id, target.label
                )
        return outcomes


def live_since(predicted: npt.NDArray[np.float64], ids: npt.NDArray[np.int64]) -> int | None:
    """The id just before the oldest row a live calibration can use (of the newest
    ``LIVE_ROWS`` rows with a prediction); None when fewer than ``MIN_LIVE_ROWS`` have one
    (the calibration then comes from held-out rows and needs no versions)."""
    routed = np.sort(ids[np.isfinite(predicted) & (predicted > 0)])
    if routed.size < MIN_LIVE_ROWS:
        return None
    return int(routed[-min(LIVE_ROWS, routed.size)]) - 1
