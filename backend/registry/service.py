"""The model registry: storing versions with the promotion gate's decision, and activation.

The gate itself is `backend/predictor/gate.py` (pure, shared with the simulator); the window is
read through `backend/samples/repository.py`.

Services never commit; `backend/registry/trainer.py` owns the units of work around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.exceptions import NotFound
from backend.pools.models import Pool
from backend.predictor.artifacts import decode_envelope
from backend.predictor.calibration import Calibration
from backend.predictor.gate import Round, Shift
from backend.predictor.live_bias import HighLoadBias, attribute, high_load_bias
from backend.predictor.regressors import LatencyModel, load_model
from backend.registry.models import ActiveModel, ModelVersion
from backend.registry.notify import Notifier
from backend.samples import repository as samples_repo
from backend.samples.models import TargetCode
from backend.transactions import after_commit, write


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


def latest_version(session: Session, pool_id: int, target: TargetCode) -> ModelVersion | None:
    """The newest stored version (active or not): it carries the previous round's shift state."""
    return session.scalar(
        select(ModelVersion)
        .where(ModelVersion.pool_id == pool_id, ModelVersion.target == int(target))
        .order_by(ModelVersion.id.desc())
        .limit(1)
    )


def shift_of(version: ModelVersion | None) -> Shift:
    if version is None or version.shift_since is None:
        return Shift(None, 0)
    return Shift(version.shift_since.timestamp(), version.shift_rounds, version.shift_from_id)


def store_version(
    session: Session,
    pool_id: int,
    target: TargetCode,
    rnd: Round,
    window_max_id: int,
    started_at: datetime,
    config: dict[str, Any],
) -> ModelVersion:
    """Store a round's candidate with the gate's decision and reason; activate it if it won."""
    result, decision = rnd.result, rnd.decision
    artifact = result.model.to_artifact()
    since = rnd.shift.since
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
        window_max_id=window_max_id,
        train_seconds=result.train_seconds,
        training_started_at=started_at,
        artifact=artifact,
        artifact_bytes=len(artifact),
        n_outliers=rnd.n_outliers,
        shift_since=None if since is None else datetime.fromtimestamp(since, UTC),
        shift_rounds=rnd.shift.rounds,
        shift_from_id=rnd.shift.from_id,
        trained_from_id=rnd.from_id,
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


def served_calibrations(
    session: Session, pool_id: int, target: TargetCode, since_id: int
) -> list[tuple[int, Calibration | None]]:
    """(newest sample id it was trained on, calibration) of every version that was activated
    and can have routed a sample newer than ``since_id``, oldest first: what
    ``gate.served_factors`` attributes each sample's prediction to. A version serves from its
    training until the next one's (approximately: the rows ingested while it trained were still
    routed by its predecessor). Only the artifacts' headers are parsed, not their trees."""
    rows = session.execute(
        select(ModelVersion.id, ModelVersion.window_max_id)
        .where(
            ModelVersion.pool_id == pool_id,
            ModelVersion.target == int(target),
            ModelVersion.activated_at.is_not(None),
        )
        .order_by(ModelVersion.window_max_id, ModelVersion.id)
    ).all()
    # The last version trained before ``since_id`` routed the rows right after it.
    first = max((i for i, (_, max_id) in enumerate(rows) if max_id <= since_id), default=0)
    out: list[tuple[int, Calibration | None]] = []
    for version_id, max_id in rows[first:]:
        header, _ = decode_envelope(load_artifact(session, version_id))
        cal = header.get("calibration")
        out.append((int(max_id), Calibration.from_dict(cal) if cal else None))
    return out


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


def version_counts(session: Session, pool_id: int) -> dict[TargetCode, tuple[int, datetime | None]]:
    """Per target: how many versions were trained, and when the newest was stored."""
    rows = session.execute(
        select(ModelVersion.target, func.count(), func.max(ModelVersion.created_at))
        .where(ModelVersion.pool_id == pool_id)
        .group_by(ModelVersion.target)
    )
    found = {TargetCode(t): (int(n), at) for t, n, at in rows}
    return {t: found.get(t, (0, None)) for t in TargetCode}


# Live bias near saturation reads at most this many of a (pool, target)'s newest predicted rows:
# a bounded read per listing, off /predict and ingestion.
HIGH_LOAD_ROWS = 10_000


def high_load_biases(
    session: Session, versions: Sequence[ModelVersion], limit: int = HIGH_LOAD_ROWS
) -> dict[int, HighLoadBias]:
    """Version id -> its live median bias in the top load decile (`predictor/live_bias.py`).

    Samples carry no version, so each row goes to the version active when it was observed
    (activation times of the pool's versions; a version rolled back to counts from its latest
    activation). One read per (pool, target) listed; versions never active, or with too few
    rows at high load among the newest `limit`, get nothing."""
    out: dict[int, HighLoadBias] = {}
    for pool_id, target in {(v.pool_id, v.target) for v in versions if v.activated_at}:
        served = session.execute(
            select(ModelVersion.id, ModelVersion.activated_at)
            .where(
                ModelVersion.pool_id == pool_id,
                ModelVersion.target == target,
                ModelVersion.activated_at.is_not(None),
            )
            .order_by(ModelVersion.activated_at)
        ).all()
        rows = samples_repo.predicted_rows(session, pool_id, TargetCode(target), limit)
        if not served or not rows.shape[0]:
            continue
        owner = attribute(rows[:, 0], [at.timestamp() for _, at in served if at is not None])
        for index, (version_id, _) in enumerate(served):
            mine = owner == index
            bias = high_load_bias(rows[mine, 1], rows[mine, 2], rows[mine, 3])
            if bias is not None:
                out[int(version_id)] = bias
    return out
