"""Desired replicas: the fewest pods at which the pool's recent traffic, replayed in the
simulator on the pod calibrated to the pool, keeps SLO attainment at the policy's target.

A periodic job (``backend/periodic.py``: Celery beat in production, a thread when embedded)
reads each pool's recent samples (``samples.repository.recent_samples``), rebuilds the requests
and calibrates the pod (``backend/sim/fromsamples.py``), bisects on the pod count and stores
the result, one row per pool (``DesiredReplicas``), so that every API process serves the same
number: each process's ``CapacityMonitor`` reads the table on its tick, and the saturation
route and the Prometheus gauge answer from that copy.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from backend.capacity.models import DesiredReplicas, DesiredReplicasPoint
from backend.policies.schemas import PolicySpec
from backend.policies.service import policy_for_pool, spec_of
from backend.pools.models import Pool
from backend.samples.models import TargetCode
from backend.samples.repository import RECENT_COLUMNS, recent_samples
from backend.settings import CapacitySettings
from backend.sim.fromsamples import (
    CALIBRATION_STEPS,
    PLATEAU_TOLERANCE,
    Calibration,
    Router,
    SampleRow,
    Workload,
    calibrate,
    estimate_replicas,
)
from backend.sim.pairing import DISPATCH_LOAD
from backend.sim.view import Slo
from backend.transactions import write

log = logging.getLogger("headroom.capacity")

_LOAD = RECENT_COLUMNS.index(DISPATCH_LOAD[0])
_POD_TYPE = RECENT_COLUMNS.index("pod_type")


def sample_rows(raw: list[tuple[object, ...]]) -> list[SampleRow]:
    """`recent_samples` tuples as the replay builder's rows."""
    out = []
    for r in raw:
        target, observed, latency, prompt, prefix, pod, pod_class, group = r[:8]
        assert isinstance(observed, datetime)
        out.append(
            SampleRow(
                TargetCode(int(target)).label,  # type: ignore[call-overload]
                observed.timestamp(),
                float(latency),  # type: ignore[arg-type]
                int(prompt),  # type: ignore[call-overload]
                float(prefix),  # type: ignore[arg-type]
                pod if isinstance(pod, str) else None,
                pod_class if isinstance(pod_class, str) else None,
                key=tuple(r[_LOAD : _LOAD + len(DISPATCH_LOAD)]),
                prefix_group=group if isinstance(group, str) else None,
                pod_type=int(r[_POD_TYPE]),  # type: ignore[call-overload]
            )
        )
    return out


@dataclass(frozen=True)
class Estimate:
    replicas: int
    met: bool
    attainment: float
    target: float
    workload: Workload
    profile: str
    scale: float
    calibration_error: float
    simulations: int
    calibration: Calibration
    rate_rps: float
    """The arrival rate replayed: the rate forecast ``desired_lead_s`` ahead
    (``fromsamples.forecast_load``; the lookback's mean without a clear trend or a lead), or
    with ``desired_rate_window_s`` the rate of its last seconds (``fromsamples.current_load``)."""
    prefill_replicas: int | None = None
    """A P/D pool's prefill pods among ``replicas`` (the rest decode pods); None when the
    samples name no prefill pod (``Workload.prefill_pods``)."""


def short_rows(rows: list[SampleRow], seconds: float) -> list[SampleRow] | None:
    """The rows of the newest ``seconds`` before the newest sample, the short replay's
    (``HEADROOM_CAPACITY__DESIRED_SHORT_REPLAY_S``); None when ``seconds`` is 0 or the rows
    span no more than it (the one replay is that window)."""
    if not seconds or not rows:
        return None
    newest = max(r.time_s for r in rows)
    if newest - min(r.time_s for r in rows) <= seconds:
        return None
    return [r for r in rows if r.time_s >= newest - seconds]


def estimate(
    rows: list[SampleRow],
    slo: Slo,
    target: float,
    settings: CapacitySettings,
    seed: int = 0,
    calibrated: Calibration | None = None,
    plateau: float = PLATEAU_TOLERANCE,
    profiles: tuple[str, ...] | None = None,
) -> Estimate | None:
    """Rebuild, calibrate (unless ``calibrated`` is given; among ``profiles``, default every
    shipped one), bisect (``fromsamples.estimate_replicas``, the simulator's autoscaler's path
    too); None when the samples hold too few requests. The newest
    ``desired_short_replay_s`` of them are replayed too and the larger count answers
    (``short_rows``, ``estimate_replicas``' ``newest``)."""
    est = estimate_replicas(
        rows,
        slo,
        target,
        router=settings.desired_router,
        max_replicas=settings.desired_max_replicas,
        calibrated=calibrated,
        seed=seed,
        rate_window_s=settings.desired_rate_window_s or None,
        lead_s=settings.desired_lead_s or None,
        plateau=plateau,
        profiles=profiles,
        newest=short_rows(rows, settings.desired_short_replay_s),
    )
    if est is None:
        return None
    d, cal = est.desired, est.calibration
    return Estimate(
        d.replicas,
        d.met,
        d.attainment,
        target,
        est.workload,
        cal.pod.profile,
        cal.pod.scale,
        cal.error,
        est.simulations,
        cal,
        est.workload.rate_rps * est.load,
        d.prefill_replicas,
    )


@dataclass(frozen=True)
class CalibrationRouter:
    """What routes the replay while the pod is calibrated: the calibration depends on it (the
    latencies do), so it is also half of the calibration's cache key."""

    name: str
    """Names the router and its options: the cache key, and what a result states."""
    route: Router
    """A simulator policy name, or a factory of the policy with its options."""


def desired_router(settings: CapacitySettings) -> CalibrationRouter:
    """The desired-replicas job's router (``desired_router``, a simulator policy name)."""
    return CalibrationRouter(settings.desired_router, settings.desired_router)


_CalibrationKey = tuple[int, str, tuple[str, ...] | None]
_calibrations: dict[_CalibrationKey, tuple[float, Calibration]] = {}
"""Per pool, router (``CalibrationRouter.name``) and the profiles it may pick
(``pool_profiles``), this process's last calibration and when it was made (monotonic seconds):
the pod does not change from one run to the next, and calibrating is most of a run's cost.
Keyed by the router too: a calibration routed by another policy folds the routing difference
into the cost factors; and by the profiles, so that a policy naming its pods' profile is not
answered with a pick made before."""


def pool_profiles(spec: PolicySpec) -> tuple[str, ...] | None:
    """The profiles a pool's calibration may pick: its policy's ``gpu_profile``, or every
    shipped one (None) where it names none."""
    return None if spec.gpu_profile == "none" else (spec.gpu_profile,)


def _calibration(key: _CalibrationKey, settings: CapacitySettings) -> Calibration | None:
    made = _calibrations.get(key)
    if made is None or time.monotonic() - made[0] > settings.desired_recalibrate_s:
        return None
    return made[1]


def recent_rows(
    session: Session, pool_id: int, settings: CapacitySettings, now: datetime
) -> list[SampleRow]:
    """The pool's samples of the lookback, as the replay builder's rows (desired replicas' and
    the advisor's pool replay's one read of them)."""
    return sample_rows(
        recent_samples(
            session,
            pool_id,
            now - timedelta(seconds=settings.desired_lookback_s),
            settings.desired_max_samples,
        )
    )


def policy_slo(spec: PolicySpec) -> Slo | None:
    """The policy's default SLOs (an unset one never misses); None when it sets neither."""
    ttft, tpot = spec.default_ttft_slo_ms, spec.default_tpot_slo_ms
    if ttft is None and tpot is None:
        return None
    return Slo(ttft if ttft is not None else math.inf, tpot if tpot is not None else math.inf)


def pool_calibration(
    pool_id: int,
    workload: Workload,
    slo: Slo,
    settings: CapacitySettings,
    router: CalibrationRouter | None = None,
    profiles: tuple[str, ...] | None = None,
) -> tuple[Calibration, bool]:
    """The pool's pod calibrated with the replay routed by ``router`` (default: desired
    replicas' router) among ``profiles`` (``pool_profiles``): this process's recent one for
    them if any, else a new one (kept for the next caller). Also whether it was reused (a new
    one costs simulations)."""
    router = router or desired_router(settings)
    key = (pool_id, router.name, profiles)
    kept = _calibration(key, settings)
    if kept is not None:
        return kept, True
    cal = calibrate(workload, router.route, slo, profiles=profiles, steps=CALIBRATION_STEPS)
    _calibrations[key] = (time.monotonic(), cal)
    return cal, False


def refresh_pool(
    session: Session, pool_id: int, settings: CapacitySettings, now: datetime
) -> DesiredReplicas | None:
    """Recompute one pool's desired replicas and store it (replacing the last); a pool with no
    SLO or too little recent traffic loses its stale row instead."""
    started = time.process_time()
    policy = policy_for_pool(session, pool_id)
    spec = spec_of(policy)
    rows = recent_rows(session, pool_id, settings, now)
    session.rollback()  # no transaction held open across the simulations
    slo = policy_slo(spec)
    est = None
    if slo is not None:
        # Routed by desired replicas' router: the replicas it estimates are that router's.
        router = desired_router(settings)
        profiles = pool_profiles(spec)
        key = (pool_id, router.name, profiles)
        kept = _calibration(key, settings)
        est = estimate(
            rows,
            slo,
            spec.target_slo_attainment,
            settings,
            calibrated=kept,
            plateau=spec.desired_plateau,
            profiles=profiles,
        )
        if est is not None and kept is None:
            _calibrations[key] = (time.monotonic(), est.calibration)
    with write(session):
        session.execute(delete(DesiredReplicas).where(DesiredReplicas.pool_id == pool_id))
        session.execute(
            delete(DesiredReplicasPoint).where(
                DesiredReplicasPoint.pool_id == pool_id,
                DesiredReplicasPoint.computed_at
                < now - timedelta(seconds=settings.desired_history_s),
            )
        )
        if est is None:
            return None
        session.add(
            DesiredReplicasPoint(
                pool_id=pool_id,
                computed_at=now,
                replicas=est.replicas,
                met=est.met,
                attainment=est.attainment,
                current_pods=len(est.workload.pods),
            )
        )
        row = DesiredReplicas(
            pool_id=pool_id,
            replicas=est.replicas,
            met=est.met,
            attainment=est.attainment,
            target=est.target,
            current_pods=len(est.workload.pods),
            prefill_replicas=est.prefill_replicas,
            current_prefill_pods=(
                est.workload.prefill_pods if est.prefill_replicas is not None else None
            ),
            requests=len(est.workload.trace),
            rate_rps=est.rate_rps,
            profile=est.profile,
            scale=est.scale,
            calibration_error=est.calibration_error if math.isfinite(est.calibration_error) else -1,
            simulations=est.simulations,
            cpu_s=time.process_time() - started,
            policy_version=policy.version if policy is not None else None,
            computed_at=now,
        )
        session.add(row)
    return row


def refresh_all(sessions: sessionmaker[Session], settings: CapacitySettings) -> int:
    """Every pool's desired replicas; a failure of one pool does not stop the others."""
    with sessions() as session:
        pool_ids = list(session.scalars(select(Pool.id)))
    done = 0
    for pool_id in pool_ids:
        try:
            with sessions() as session:
                if refresh_pool(session, pool_id, settings, datetime.now(UTC)) is not None:
                    done += 1
        except Exception:
            log.exception("desired replicas of pool %s failed; the last value is kept", pool_id)
    return done


def history(session: Session, pool_id: int, since: datetime) -> list[DesiredReplicasPoint]:
    """The pool's desired-replicas runs since ``since``, oldest first (the Overview's chart;
    the same on every API replica, since the worker stores them)."""
    return list(
        session.scalars(
            select(DesiredReplicasPoint)
            .where(
                DesiredReplicasPoint.pool_id == pool_id, DesiredReplicasPoint.computed_at >= since
            )
            .order_by(DesiredReplicasPoint.computed_at)
        )
    )


def read_all(session: Session) -> dict[int, DesiredReplicas]:
    """Every pool's last desired replicas, by pool id (detached: safe to keep in memory)."""
    rows = list(session.scalars(select(DesiredReplicas)))
    session.expunge_all()
    return {r.pool_id: r for r in rows}
