"""What the console's read-only pages show, computed from the domains' tables and services.

Every figure is computed per request from the database (and the in-memory models), so that
every replica shows the same thing; `bench/console.py` checks that each page stays within
300 ms with a full window and 100 model versions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from backend.capacity.desired import history as desired_history
from backend.capacity.models import DesiredReplicas, DesiredReplicasPoint
from backend.capacity.service import CapacityMonitor, PoolReport
from backend.pools.models import Pool
from backend.predictor import gate
from backend.predictor.evaluation import evaluate
from backend.predictor.knowable import AgainstFloor, FloorWindow
from backend.predictor.live_bias import OPTIMISTIC_BEYOND, HighLoadBias
from backend.predictor.regressors import LatencyModel
from backend.predictor.serving import ModelStore
from backend.predictor.training import predict_columns
from backend.predictor.window import WindowSpec
from backend.registry import service as registry
from backend.registry.models import ModelVersion
from backend.samples import repository as samples_repo
from backend.samples.models import TargetCode
from backend.samples.schemas import RoleCount
from backend.samples.service import window_stats
from backend.scheduling.saturation import Headroom
from backend.settings import Settings

# "Recent" figures (ingestion rate, last sample, live error) come from the newest samples of
# all pools, read once per page: a bounded read, however large the windows are.
RECENT_ROWS = 20_000
# Live error is measured on the newest samples that carry the router's prediction.
LIVE_ROWS = 2000
# Ingestion rate: samples that arrived within the last minute.
RATE_HORIZON_S = 60
# The held-out set can hold tens of thousands of rows; the scatter scores a sample of about
# this many (reading and predicting all would cost more than the rest of the page, and show
# no more).
SCATTER_POINTS = 2000
# "Error rising": the newest held-out MAPE against the median of the versions before it. It
# needs a margin in absolute points, or a 1 % -> 2 % wobble of an excellent model would alarm.
# (The live error's warning is the gate's drift rule, `gate.RoutedError`: routed traffic's live
# error sits above the held-out error without any change, so a ratio to the held-out alone
# warned on every pool from its first minute, as the demo showed.)
RISE_RATIO = 1.5
RISE_MIN_POINTS = 0.02
TREND_VERSIONS = 5


@dataclass(frozen=True)
class LiveError:
    """Error of the predictions the router used, from samples that carry `predicted_*_ms`."""

    n: int
    mape: float
    bias: float


@dataclass(frozen=True)
class Recent:
    """The newest RECENT_ROWS samples of all pools, as columns (newest first)."""

    pool_id: npt.NDArray[np.int64]
    target: npt.NDArray[np.int64]
    sample_id: npt.NDArray[np.int64]
    latency: npt.NDArray[np.float64]
    predicted: npt.NDArray[np.float64]
    """NaN where the sample carries no prediction."""
    arrived_last_minute: dict[int, int]
    """Per pool: samples of the slice observed within RATE_HORIZON_S."""
    span_s: float
    """How far back in time the slice reaches (it is shorter than a minute under heavy load)."""
    full: bool
    """True when the slice holds RECENT_ROWS samples (older ones exist beyond it)."""

    def newest_id(self, pool_id: int, target: TargetCode | None = None) -> int | None:
        mask = self.pool_id == pool_id
        if target is not None:
            mask &= self.target == int(target)
        ids = self.sample_id[mask]
        return int(ids[0]) if ids.size else None

    def per_minute(self, pool_id: int) -> float:
        count = self.arrived_last_minute.get(pool_id, 0)
        if self.full and 0 < self.span_s < RATE_HORIZON_S:
            # More samples arrived in the last minute than the slice holds: scale up.
            return count * 60.0 / self.span_s
        return count * 60.0 / RATE_HORIZON_S

    def routed_error(
        self, pool_id: int, target: TargetCode, active_max_id: int
    ) -> gate.RoutedError:
        """The gate's drift yardsticks on the slice: the samples since the active model's
        training (ids above ``active_max_id``) against the older ones."""
        mask = (self.pool_id == pool_id) & (self.target == int(target))
        ids = self.sample_id[mask]
        since = ids > active_max_id
        return gate.routed_error(self.latency[mask], self.predicted[mask], ids, since, ~since)

    def live_error(self, pool_id: int, target: TargetCode) -> LiveError | None:
        mask = (
            (self.pool_id == pool_id)
            & (self.target == int(target))
            & np.isfinite(self.predicted)
            & (self.latency > 0)
        )
        actual = self.latency[mask][:LIVE_ROWS]
        if actual.size == 0:
            return None
        relative = (self.predicted[mask][:LIVE_ROWS] - actual) / actual
        return LiveError(
            int(actual.size), float(np.mean(np.abs(relative))), float(np.median(relative))
        )


def recent_samples(session: Session, now: datetime) -> Recent:
    data = samples_repo.newest_rows(session, RECENT_ROWS)
    arrived = samples_repo.arrivals_since(
        session, now - timedelta(seconds=RATE_HORIZON_S), RECENT_ROWS
    )
    span = 0.0
    if data.shape[0]:
        oldest = samples_repo.observed_at(session, int(data[-1, 0]))
        span = (now - oldest).total_seconds() if oldest is not None else 0.0
    return Recent(
        pool_id=data[:, 1].astype(np.int64),
        target=data[:, 2].astype(np.int64),
        sample_id=data[:, 0].astype(np.int64),
        latency=data[:, 3],
        predicted=data[:, 4],
        arrived_last_minute=arrived,
        span_s=span,
        full=data.shape[0] == RECENT_ROWS,
    )


def last_sample_at(session: Session, pool_id: int, recent: Recent) -> datetime | None:
    newest = recent.newest_id(pool_id)
    if newest is None:
        # A quiet pool: nothing among the newest samples of all pools.
        newest = samples_repo.max_id(session, pool_id)
        if not newest:
            return None
    return samples_repo.observed_at(session, newest)


@dataclass(frozen=True)
class TargetStatus:
    target: TargetCode
    version: ModelVersion | None
    last_trained_at: datetime | None
    newest_sample_id: int
    trained_through_id: int
    live: LiveError | None
    warnings: list[str]
    high_load: HighLoadBias | None = None

    @property
    def mape(self) -> float | None:
        return _metric(self.version, "mape")

    @property
    def bias(self) -> float | None:
        return _metric(self.version, "median_bias")

    @property
    def waiting_samples(self) -> bool:
        return self.newest_sample_id > self.trained_through_id


def _metric(version: ModelVersion | None, key: str) -> float | None:
    if version is None or not version.metrics:
        return None
    value = version.metrics.get(key)
    return float(value) if isinstance(value, int | float) else None


# The Overview's saturation chart: an inline SVG of this size (no script, so htmx's 5 s swap
# redraws it as it is).
CHART_W, CHART_H = 240.0, 48.0
# Why a pool has no level, in words (the statuses of backend/capacity/service.py).
NO_LEVEL = {
    "no_slo": "the pool's policy sets no SLO",
    "no_model": "no TTFT model is active yet",
    "no_fresh_pods": "no pod has reported recently (samples carry no pod, or are stale)",
    "no_traffic": "no recent requests to take as representative",
}


@dataclass(frozen=True)
class ReplicaChart:
    """Desired replicas and the pods the replay saw, per stored run, as SVG polylines over a
    CHART_W x CHART_H box (0 pods at the bottom, ``top`` at the top)."""

    desired: str
    current: str
    top: int
    points: int
    span_s: float


def replica_chart(points: Sequence[DesiredReplicasPoint]) -> ReplicaChart | None:
    if not points:
        return None
    start = points[0].computed_at
    span = (points[-1].computed_at - start).total_seconds()
    top = max(1, *(max(p.replicas, p.current_pods) for p in points))

    def line(value: Callable[[DesiredReplicasPoint], int]) -> str:
        out = []
        for p in points:
            x = CHART_W * ((p.computed_at - start).total_seconds() / span if span > 0 else 1.0)
            out.append(f"{x:.1f},{CHART_H * (1.0 - value(p) / top):.1f}")
        return " ".join(out)

    return ReplicaChart(
        line(lambda p: p.replicas), line(lambda p: p.current_pods), top, len(points), span
    )


@dataclass(frozen=True)
class SaturationPanel:
    """A pool's saturation as this process's capacity monitor last computed it, with its recent
    history (see docs/capacity.md)."""

    status: str
    level: float | None
    p50: Headroom | None
    p90: Headroom | None
    fresh_pods: int
    stale_pods: tuple[str, ...]
    ttft_slo_ms: float | None
    tpot_slo_ms: float | None
    lines: list[str]
    """SVG polyline point lists (one per run of ticks with a level), 0 at the bottom."""
    span_s: float
    """How far back the chart reaches."""
    desired: DesiredReplicas | None = None
    """The pool's desired replicas as the worker last stored them (docs/capacity.md)."""
    desired_chart: ReplicaChart | None = None
    """Its recent runs (None with fewer than one stored)."""
    present_level: float | None = None
    """The level's two parts: the pods as they stand, and the next interval's (None when
    nothing was replayed)."""
    next_level: float | None = None
    uncorrected_level: float | None = None
    """The level before its record's correction, and the bias taken off (None: not
    corrected; ``backend.scheduling.record``)."""
    record_bias: float | None = None
    saturation_replicas: int | None = None
    """Pods the saturation level asks for (``headroom_saturation_replicas``)."""
    role_replicas: dict[str, int] | None = None
    """A P/D pool's count per role (``headroom_saturation_role_replicas``)."""
    count_lines: tuple[str, ...] = ()
    """Its recent ticks as polylines, 0 pods at the bottom and ``count_top`` at the top."""
    count_top: int = 0

    @property
    def reason(self) -> str:
        return NO_LEVEL.get(self.status, self.status.replace("_", " "))


def chart_lines(
    points: list[tuple[datetime, float | None]], top: float = 1.0
) -> tuple[list[str], float]:
    """History -> polylines over a CHART_W x CHART_H box, 0 at the bottom and ``top`` at the
    top, oldest left, newest right; a tick without a value breaks the line instead of drawing
    a false 0."""
    if not points:
        return [], 0.0
    start, end = points[0][0], points[-1][0]
    span = (end - start).total_seconds()
    lines: list[str] = []
    run: list[str] = []
    for at, level in points:
        if level is None:
            if run:
                lines.append(" ".join(run))
            run = []
            continue
        x = CHART_W * ((at - start).total_seconds() / span if span > 0 else 1.0)
        y = CHART_H * (1.0 - min(max(level / top, 0.0), 1.0))
        run.append(f"{x:.1f},{y:.1f}")
    if run:
        lines.append(" ".join(run))
    return lines, span


def saturation_panel(
    report: PoolReport | None,
    history: list[tuple[datetime, float | None]],
    desired: DesiredReplicas | None = None,
    desired_points: Sequence[DesiredReplicasPoint] = (),
    counts: list[tuple[datetime, float | None]] | None = None,
) -> SaturationPanel | None:
    if report is None:
        return None  # before the first tick: nothing to show yet
    sat = report.saturation
    lines, span = chart_lines(history)
    asked = [c for _, c in counts or () if c is not None]
    count_top = int(max(asked)) if asked else 0
    count_lines = chart_lines(counts or [], top=float(count_top))[0] if count_top else []
    return SaturationPanel(
        status=report.status,
        level=sat.level if sat else None,
        p50=sat.p50 if sat else None,
        p90=sat.p90 if sat else None,
        fresh_pods=report.fresh_pods,
        stale_pods=report.stale_pods,
        ttft_slo_ms=report.ttft_slo_ms,
        tpot_slo_ms=report.tpot_slo_ms,
        lines=lines,
        span_s=span,
        desired=desired,
        desired_chart=replica_chart(desired_points) if desired is not None else None,
        present_level=sat.present_level if sat else None,
        next_level=sat.next_level if sat else None,
        uncorrected_level=sat.uncorrected_level if sat else None,
        record_bias=sat.record_bias if sat else None,
        saturation_replicas=report.saturation_replicas,
        role_replicas=report.role_replicas,
        count_lines=tuple(count_lines),
        count_top=count_top,
    )


@dataclass(frozen=True)
class PoolStatus:
    pool: Pool
    targets: list[TargetStatus]
    last_sample_at: datetime | None
    samples_per_min: float
    saturation: SaturationPanel | None = None

    @property
    def warnings(self) -> list[str]:
        return [w for t in self.targets for w in t.warnings]


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def _trend_rising(session: Session, pool_id: int, target: TargetCode) -> str | None:
    recent = session.scalars(
        select(ModelVersion.metrics)
        .where(ModelVersion.pool_id == pool_id, ModelVersion.target == int(target))
        .order_by(ModelVersion.id.desc())
        .limit(TREND_VERSIONS + 1)
    ).all()
    mapes = [m.get("mape") for m in recent if m and isinstance(m.get("mape"), int | float)]
    if len(mapes) < 3:
        return None
    newest, before = float(mapes[0]), float(np.median(mapes[1:]))
    if newest > before * RISE_RATIO and newest - before > RISE_MIN_POINTS:
        return (
            f"{target.label.upper()} error rising: newest held-out MAPE {_pct(newest)} against "
            f"{_pct(before)} for the versions before it"
        )
    return None


def _drifted(
    name: str, version: ModelVersion, routed: gate.RoutedError, settings: Settings
) -> str | None:
    """The warning when the gate's drift rule holds on the newest samples: the trainer's next
    round then replaces the active model with one of the newer rows."""
    held_out = _metric(version, "mape")
    rules = gate.GateRules.from_settings(settings.training)
    if held_out is None or routed.live is None or routed.drift(held_out, rules) is None:
        return None
    usual = (
        f" and {rules.drift_factor:g}x the usual live error of routed traffic "
        f"({_pct(routed.earlier.mape)} on {routed.earlier.n} older samples)"
        if routed.earlier is not None and routed.earlier.n >= rules.min_test
        else ""
    )
    return (
        f"{name} live error {_pct(routed.live.mape)} on the {routed.live.n} samples since the "
        f"active model's training is above {rules.drift_factor:g}x its held-out "
        f"{_pct(held_out)}{usual}: the traffic has changed, and the next training round "
        "replaces the model with one of the newer samples"
    )


def target_status(
    session: Session,
    pool: Pool,
    target: TargetCode,
    settings: Settings,
    now: datetime,
    recent: Recent,
) -> TargetStatus:
    name = target.label.upper()
    version = registry.active_version(session, pool.id, target)
    last_trained_at = session.scalar(
        select(func.max(ModelVersion.created_at)).where(
            ModelVersion.pool_id == pool.id, ModelVersion.target == int(target)
        )
    )
    newest = recent.newest_id(pool.id, target)
    if newest is None:
        newest = samples_repo.max_id(session, pool.id, target)
    through = registry.last_trained_max_id(session, pool.id, target)
    live = recent.live_error(pool.id, target)
    warnings: list[str] = []
    high_load: HighLoadBias | None = None
    if version is None:
        if newest:
            warnings.append(f"{name}: samples are arriving but no model is active yet")
    else:
        stale_s = settings.ui.stale_after_s
        trained_age = (now - last_trained_at).total_seconds() if last_trained_at else math.inf
        if newest > through and trained_age > stale_s:
            warnings.append(
                f"{name} model is stale: new samples arrived, and the last training was "
                f"{trained_age / 60:.0f} min ago (limit {stale_s / 60:.0f} min)"
            )
        rising = _trend_rising(session, pool.id, target)
        if rising:
            warnings.append(rising)
        drifted = _drifted(
            name, version, recent.routed_error(pool.id, target, version.window_max_id), settings
        )
        if drifted:
            warnings.append(drifted)
        high_load = registry.high_load_biases(session, [version], LIVE_ROWS).get(version.id)
        if high_load is not None and high_load.optimistic:
            warnings.append(
                f"{name} is biased optimistic near saturation: in the top load decile "
                f"(running + waiting >= {high_load.load_threshold:g}) the active model predicts "
                f"{_pct(-high_load.bias)} below actual (median of {high_load.n} live rows; "
                f"limit {_pct(-OPTIMISTIC_BEYOND)})"
            )
    return TargetStatus(
        target, version, last_trained_at, newest, through, live, warnings, high_load
    )


def pool_status(
    session: Session,
    pool: Pool,
    settings: Settings,
    now: datetime,
    recent: Recent,
    capacity: CapacityMonitor | None = None,
) -> PoolStatus:
    return PoolStatus(
        pool=pool,
        targets=[target_status(session, pool, t, settings, now, recent) for t in TargetCode],
        last_sample_at=last_sample_at(session, pool.id, recent),
        samples_per_min=recent.per_minute(pool.id),
        saturation=saturation_panel(
            capacity.report(pool.name),
            capacity.history(pool.name),
            capacity.desired(pool.name),
            desired_history(
                session, pool.id, now - timedelta(seconds=settings.capacity.desired_history_s)
            ),
            capacity.count_history(pool.name),
        )
        if capacity is not None
        else None,
    )


def overview(
    session: Session,
    pools: list[Pool],
    settings: Settings,
    capacity: CapacityMonitor | None = None,
) -> list[PoolStatus]:
    now = datetime.now(UTC)
    recent = recent_samples(session, now)
    return [pool_status(session, pool, settings, now, recent, capacity) for pool in pools]


# Models page


@dataclass(frozen=True)
class Scatter:
    """The active model's predictions against held-out labels, on a sample of the rows."""

    version_id: int
    one_in: int
    """Rows scored: about one in this many of the held-out rows."""
    n: int
    mape: float
    bias: float
    points: list[tuple[float, float]]


def _model_for(
    session: Session, store: ModelStore, pool: Pool, target: TargetCode, version_id: int
) -> LatencyModel:
    served = store.get(pool.name, target.label)
    if served is not None and served.version_id == version_id:
        return served.model  # already in memory: no artifact to read and parse
    return registry.load_version_model(session, version_id)


def held_out_scatter(
    session: Session, store: ModelStore, pool: Pool, target: TargetCode, version: ModelVersion
) -> Scatter | None:
    # Read about SCATTER_POINTS rows, not the whole held-out set: a model's n_test tells how
    # many there are, and a hash of the id picks a sample that the window's index can find.
    one_in = max(1, version.n_test // SCATTER_POINTS)
    window = samples_repo.read_held_out(session, pool.id, target, one_in)
    index = np.flatnonzero(window.labels > 0)
    if index.size == 0:
        return None
    if index.size > SCATTER_POINTS:
        # A fixed seed: the same window shows the same points on every refresh.
        index = np.sort(np.random.default_rng(0).choice(index, SCATTER_POINTS, replace=False))
    cols = {k: v[index] for k, v in window.cols.items()}
    labels = window.labels[index]
    model = _model_for(session, store, pool, target, version.id)
    predicted = np.asarray(predict_columns(model, target.label, cols), dtype=np.float64)
    metrics = evaluate(labels, predicted)
    points = [
        (round(float(a), 3), round(float(p), 3)) for a, p in zip(labels, predicted, strict=True)
    ]
    return Scatter(version.id, one_in, metrics.n, metrics.mape, metrics.median_bias, points)


@dataclass(frozen=True)
class ModelsView:
    target: TargetCode
    versions: list[ModelVersion]
    active: ModelVersion | None
    scatter: Scatter | None
    live: LiveError | None
    mape_series: list[dict[str, Any]] = field(default_factory=list)
    high_load: dict[int, HighLoadBias] = field(default_factory=dict)
    """Version id -> its live median bias in the top load decile."""
    knowable: AgainstFloor | None = None
    """A simulated pool's live error beside the present-state floor on the same requests."""


def models_view(
    session: Session,
    store: ModelStore,
    pool: Pool,
    target: TargetCode,
    limit: int = 100,
    knowable: FloorWindow | None = None,
) -> ModelsView:
    """``knowable``: the demo's window of predictions beside their floor (None outside the
    demo: a real pod cannot be copied to measure one)."""
    versions = list(registry.list_versions(session, pool.id, target, limit))
    active = registry.active_version(session, pool.id, target)
    scatter = held_out_scatter(session, store, pool, target, active) if active else None
    series = [
        {
            "id": v.id,
            "at": v.created_at.isoformat(),
            "mape": round(float(v.metrics["mape"]), 5),
            "status": v.status,
        }
        for v in reversed(versions)
        if v.metrics and isinstance(v.metrics.get("mape"), int | float)
    ]
    return ModelsView(
        target=target,
        versions=versions,
        active=active,
        scatter=scatter,
        live=recent_samples(session, datetime.now(UTC)).live_error(pool.id, target),
        mape_series=series,
        high_load=registry.high_load_biases(session, versions),
        knowable=knowable.summary(pool.name, target.label) if knowable is not None else None,
    )


# Samples page


@dataclass(frozen=True)
class Cell:
    train: int
    test: int
    fill: float
    """Share of the per-bucket cap in use, 0..1 (for the colour)."""

    @property
    def total(self) -> int:
        return self.train + self.test


@dataclass(frozen=True)
class Band:
    label: str
    rows: list[tuple[str, list[Cell]]]
    """One row per KV bucket (label, then one cell per prefix bucket)."""
    total: int


@dataclass(frozen=True)
class TargetCoverage:
    target: str
    train: int
    test: int
    buckets_used: int
    buckets_full: int
    bands: list[Band]


@dataclass(frozen=True)
class SamplesView:
    cap: int
    n_buckets: int
    prefix_labels: list[str]
    targets: list[TargetCoverage]
    samples_per_min: float
    last_sample_at: datetime | None
    pod_types: list[RoleCount]


def _range(lo: float, hi: float) -> str:
    return f"{lo:g}-{hi:g}"


def _band_label(lo: int, hi: int | None) -> str:
    if hi is None:
        return f"{lo}+ waiting"
    return f"{lo} waiting" if lo == hi else f"{lo}-{hi} waiting"


def samples_view(session: Session, pool: Pool, spec: WindowSpec) -> SamplesView:
    stats = window_stats(session, pool.name, pool.id, spec)
    prefix_labels = [
        _range(*spec.ranges(p)[1]) for p in range(spec.n_prefix)
    ]  # bucket p has kv 0, band 0
    targets = []
    for label, target_stats in stats.targets.items():
        grid = {b.bucket: b for b in target_stats.buckets}
        bands = []
        for q in range(spec.n_queue):
            rows = []
            band_total = 0
            for k in range(spec.n_kv):
                cells = []
                for p in range(spec.n_prefix):
                    bucket = (q * spec.n_kv + k) * spec.n_prefix + p
                    found = grid.get(bucket)
                    train, test = (found.train, found.test) if found else (0, 0)
                    band_total += train + test
                    cells.append(Cell(train, test, min(1.0, (train + test) / spec.cap)))
                kv_lo, kv_hi = spec.ranges((q * spec.n_kv + k) * spec.n_prefix)[0]
                rows.append((_range(kv_lo, kv_hi), cells))
            q_lo, q_hi = spec.ranges(q * spec.n_kv * spec.n_prefix)[2]
            bands.append(Band(_band_label(q_lo, q_hi), rows, band_total))
        targets.append(
            TargetCoverage(
                target=label,
                train=target_stats.train,
                test=target_stats.test,
                buckets_used=len(target_stats.buckets),
                buckets_full=sum(1 for b in target_stats.buckets if b.train + b.test >= spec.cap),
                bands=bands,
            )
        )
    recent = recent_samples(session, datetime.now(UTC))
    return SamplesView(
        cap=spec.cap,
        n_buckets=spec.n_buckets,
        prefix_labels=prefix_labels,
        targets=targets,
        samples_per_min=recent.per_minute(pool.id),
        last_sample_at=last_sample_at(session, pool.id, recent),
        pod_types=stats.pod_types,
    )
