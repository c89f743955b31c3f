"""The model registry: reading a training window, storing versions, the quality gate, activation.

Services never commit; `backend/registry/trainer.py` owns the units of work around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.exceptions import NotFound
from backend.pools.models import Pool
from backend.predictor.evaluation import evaluate
from backend.predictor.regressors import LatencyModel, load_model
from backend.predictor.training import TrainResult, predict_columns
from backend.registry.models import ActiveModel, ModelVersion
from backend.registry.notify import Notifier
from backend.samples.models import WINDOW_FEATURES, Sample, TargetCode
from backend.samples.schemas import POD_TYPE_NAMES
from backend.settings import TrainingSettings
from backend.transactions import after_commit, write

_WINDOW_SELECT = (
    f"SELECT {', '.join(WINDOW_FEATURES)}, latency_ms, is_test, id, pod_class FROM samples"
)

assert POD_TYPE_NAMES[0] == ""  # pod_type is stored as its code, which is what features expect


@dataclass(frozen=True)
class Window:
    cols: dict[str, npt.NDArray[Any]]
    labels: npt.NDArray[np.float64]
    is_test: npt.NDArray[np.bool_]
    max_id: int

    @property
    def n(self) -> int:
        return int(self.labels.shape[0])


def read_window(session: Session, pool_id: int, target: TargetCode) -> Window:
    """Every row of a (pool, target) window as columns (call after trimming)."""
    return _read(session, pool_id, target)


def _read(session: Session, pool_id: int, target: TargetCode, where: str = "") -> Window:
    """Window rows as columns, through the raw DB-API cursor: plain tuples straight into numpy
    are several times faster than building SQLAlchemy rows for 100,000 samples. The ids are
    ints we own, so formatting them into the statement is safe (and sidesteps the drivers'
    paramstyles); `where` is SQL of this module's own making."""
    cursor = session.connection().connection.cursor()
    try:
        cursor.execute(
            f"{_WINDOW_SELECT} WHERE pool_id = {int(pool_id)} AND target = {int(target)}{where}"
        )
        rows = cursor.fetchall()
    finally:
        cursor.close()
    width = len(WINDOW_FEATURES) + 3
    # The pod class is the only text column: split it off before the numeric conversion.
    classes = np.array([r[-1] for r in rows], dtype=object)
    data = np.array([r[:-1] for r in rows], dtype=np.float64).reshape(len(rows), width)
    cols: dict[str, npt.NDArray[Any]] = {n: data[:, i] for i, n in enumerate(WINDOW_FEATURES)}
    cols["pod_class"] = classes
    n = len(WINDOW_FEATURES)
    max_id = int(data[:, n + 2].max()) if len(rows) else 0
    return Window(cols, data[:, n], data[:, n + 1].astype(bool), max_id)


def window_max_id(session: Session, pool_id: int, target: TargetCode) -> int:
    value = session.scalar(
        select(func.max(Sample.id)).where(Sample.pool_id == pool_id, Sample.target == int(target))
    )
    return int(value or 0)


def window_size(session: Session, pool_id: int, target: TargetCode) -> int:
    value = session.scalar(
        select(func.count())
        .select_from(Sample)
        .where(Sample.pool_id == pool_id, Sample.target == int(target))
    )
    return int(value or 0)


def last_trained_max_id(session: Session, pool_id: int, target: TargetCode) -> int:
    """The newest sample id any stored version of (pool, target) was trained on (0 if none)."""
    value = session.scalar(
        select(func.max(ModelVersion.window_max_id)).where(
            ModelVersion.pool_id == pool_id, ModelVersion.target == int(target)
        )
    )
    return int(value or 0)


def active_version(session: Session, pool_id: int, target: TargetCode) -> ModelVersion | None:
    return session.scalar(
        select(ModelVersion)
        .join(ActiveModel, ActiveModel.version_id == ModelVersion.id)
        .where(ActiveModel.pool_id == pool_id, ActiveModel.target == int(target))
    )


@dataclass(frozen=True)
class GateDecision:
    activate: bool
    reason: str


def quality_gate(
    result: TrainResult,
    window: Window,
    target: TargetCode,
    active: LatencyModel | None,
    training: TrainingSettings,
) -> GateDecision:
    """Should the candidate replace the active model? Both are scored on the same held-out rows.

    The score is MAPE for the mean objective and the pinball loss for a quantile objective
    (a p90 model is meant to be above most labels, which MAPE would punish).
    """
    metrics = result.metrics
    if metrics is not None and not np.isfinite(metrics.mape):
        return GateDecision(False, "held-out error is not finite")
    if active is None:
        return GateDecision(True, "first model of this target")
    if metrics is None or result.n_test < training.gate_min_test:
        return GateDecision(
            True, f"fewer than {training.gate_min_test} held-out rows: the newest model wins"
        )
    quantile = training.quantile if training.objective == "quantile" else None
    mask = window.is_test & (window.labels > 0)
    predicted = predict_columns(active, target.label, _select(window, mask))
    current = evaluate(window.labels[mask], predicted, quantile=quantile)
    name = "pinball loss" if quantile is not None else "MAPE"
    mine = metrics.quantile_loss if quantile is not None else metrics.mape
    theirs = current.quantile_loss if quantile is not None else current.mape
    assert mine is not None and theirs is not None
    verdict = f"held-out {name} {mine:.4f} vs active {theirs:.4f} on the same rows"
    if mine <= theirs * (1 + training.gate_tolerance):
        return GateDecision(True, verdict)
    return GateDecision(False, f"{verdict}: worse by more than {training.gate_tolerance:.0%}")


def _select(window: Window, mask: npt.NDArray[np.bool_]) -> dict[str, npt.NDArray[Any]]:
    return {k: v[mask] for k, v in window.cols.items()}


def store_version(
    session: Session,
    pool_id: int,
    target: TargetCode,
    result: TrainResult,
    window: Window,
    decision: GateDecision,
    started_at: datetime,
    config: dict[str, Any],
) -> ModelVersion:
    artifact = result.model.to_artifact()
    version = ModelVersion(
        pool_id=pool_id,
        target=int(target),
        kind=config["kind"],
        objective=config["objective"],
        quantile=config["quantile"],
        status="rejected",
        gate_reason=decision.reason[:500],
        metrics=result.metrics.as_dict() if result.metrics else {},
        n_train=result.n_train,
        n_test=result.n_test,
        window_max_id=window.max_id,
        train_seconds=result.train_seconds,
        training_started_at=started_at,
        artifact=artifact,
        artifact_bytes=len(artifact),
    )
    session.add(version)
    session.flush()
    if decision.activate:
        activate(session, version, by="trainer")
    return version


def activate(session: Session, version: ModelVersion, by: str) -> None:
    """Point (pool, target) at `version`; the previous active version is retired."""
    now = datetime.now(UTC)
    pointer = session.get(ActiveModel, (version.pool_id, version.target), with_for_update=True)
    if pointer is not None and pointer.version_id != version.id:
        previous = session.get(ModelVersion, pointer.version_id)
        if previous is not None:
            previous.status = "retired"
    if pointer is None:
        pointer = ActiveModel(pool_id=version.pool_id, target=version.target)
        session.add(pointer)
    pointer.version_id = version.id
    pointer.activated_at = now
    pointer.activated_by = by
    version.status = "active"
    version.activated_at = now
    session.flush()


def get_version(session: Session, version_id: int) -> ModelVersion:
    version = session.get(ModelVersion, version_id)
    if version is None:
        raise NotFound(f"model version {version_id} not found")
    return version


def activate_version(
    session: Session, notifier: Notifier, version_id: int, by: str
) -> ModelVersion:
    """Serve a stored version (a roll back or forward), as `by`: the API and the console.

    Replicas are told after the commit, so that every listener finds the row it is told about.
    """
    with write(session):
        version = get_version(session, version_id)
        activate(session, version, by=by[:100])
        event = {
            "pool_id": version.pool_id,
            "target": TargetCode(version.target).label,
            "version_id": version.id,
        }
        after_commit(session, lambda: notifier.publish(event))
    return version


def load_artifact(session: Session, version_id: int) -> bytes:
    data = session.scalar(select(ModelVersion.artifact).where(ModelVersion.id == version_id))
    if data is None:
        raise LookupError(f"model version {version_id} not found")
    return data


def load_version_model(session: Session, version_id: int) -> LatencyModel:
    return load_model(load_artifact(session, version_id))


@dataclass(frozen=True)
class ActiveRef:
    pool: str
    pool_id: int
    target: TargetCode
    version_id: int
    activated_at: datetime
    kind: str
    objective: str
    quantile: float
    metrics: dict[str, Any]


def active_refs(session: Session) -> list[ActiveRef]:
    """Every (pool, target) pointer, without artifacts: what serving polls and compares."""
    rows = session.execute(
        select(
            Pool.name,
            ActiveModel.pool_id,
            ActiveModel.target,
            ActiveModel.version_id,
            ActiveModel.activated_at,
            ModelVersion.kind,
            ModelVersion.objective,
            ModelVersion.quantile,
            ModelVersion.metrics,
        )
        .join(Pool, Pool.id == ActiveModel.pool_id)
        .join(ModelVersion, ModelVersion.id == ActiveModel.version_id)
    )
    return [
        ActiveRef(name, pid, TargetCode(t), vid, at, kind, obj, q, m)
        for name, pid, t, vid, at, kind, obj, q, m in rows
    ]


def list_versions(
    session: Session, pool_id: int | None, target: TargetCode | None, limit: int
) -> Sequence[ModelVersion]:
    query = select(ModelVersion).order_by(ModelVersion.id.desc()).limit(limit)
    if pool_id is not None:
        query = query.where(ModelVersion.pool_id == pool_id)
    if target is not None:
        query = query.where(ModelVersion.target == int(target))
    return session.scalars(query).all()


def pool_names(session: Session) -> dict[int, str]:
    return {pool_id: name for pool_id, name in session.execute(select(Pool.id, Pool.name))}


def read_held_out(session: Session, pool_id: int, target: TargetCode, one_in: int = 1) -> Window:
    """The held-out rows of a (pool, target) window, as `read_window` returns them; with
    `one_in` > 1 about one in that many, picked by a multiplicative (Fibonacci) hash of the id.
    The id is in the window's index, so the rows left out are never read. A plain `id % n`
    would not do: consecutive ids alternate between targets (and pools), so it could pick all
    of one target and none of the other. The console scores the active model on these rows."""
    keep = ""
    if one_in > 1:
        keep = f" AND ((id % 65536) * 40503) % 65536 < {-(-65536 // int(one_in))}"
    return _read(session, pool_id, target, f" AND is_test{keep}")
