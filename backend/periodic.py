"""The periodic jobs of the control plane, defined once.

Both schedulers read this table: the embedded mode's threads (`backend/background.py`) and, in
production, Celery beat (`backend/tasks.py` builds its schedule from it) with the worker
registering one task per row (`workers/tasks.py`). A row names the job, the Celery task that
runs it, its interval (a setting) and the service function it calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from backend.auth.sessions import purge_expired, utcnow
from backend.capacity.desired import refresh_all
from backend.db import unit_of_work
from backend.registry.trainer import Trainer
from backend.samples.models import TargetCode
from backend.samples.service import trim_all_windows
from backend.settings import Settings

log = logging.getLogger("headroom.periodic")


@dataclass(frozen=True)
class JobContext:
    """What a periodic job runs with, in whichever process runs it."""

    settings: Settings
    sessions: sessionmaker[Session]
    trainer: Trainer
    # How one due (pool, target) gets trained: in this process (embedded), or as a task of its
    # own (Celery), so that several workers share the targets.
    train: Callable[[int, TargetCode], object]


def trim_windows(ctx: JobContext) -> int:
    """Bring every window back to its per-bucket cap."""
    with unit_of_work(ctx.sessions) as session:
        return trim_all_windows(session, ctx.settings.window.cap)


def retrain_due(ctx: JobContext) -> int:
    """Train every (pool, target) with new samples; a failure of one does not stop the others."""
    due = ctx.trainer.due()
    for pool_id, target in due:
        try:
            ctx.train(pool_id, target)
        except Exception:
            log.exception("training pool %s %s failed; the active model stays", pool_id, target)
    return len(due)


def purge_sign_ins(ctx: JobContext) -> tuple[int, int]:
    """Delete expired console sessions and failed sign-ins older than the limit's window."""
    with unit_of_work(ctx.sessions) as session:
        return purge_expired(session, utcnow(), ctx.settings)


def desired_replicas(ctx: JobContext) -> int:
    """Every pool's desired replicas, replayed and stored for the API processes to serve."""
    return refresh_all(ctx.sessions, ctx.settings.capacity)


@dataclass(frozen=True)
class PeriodicJob:
    name: str
    """The embedded thread's name and the beat schedule's key."""
    task: str
    """The Celery task that runs it in production."""
    interval_s: Callable[[Settings], float]
    run: Callable[[JobContext], object]


PERIODIC_JOBS: tuple[PeriodicJob, ...] = (
    PeriodicJob(
        "trim-windows", "headroom.trim_windows", lambda s: s.window.trim_interval_s, trim_windows
    ),
    PeriodicJob("retrain", "headroom.retrain_due", lambda s: s.training.interval_s, retrain_due),
    PeriodicJob(
        "purge-sign-ins", "headroom.purge_sign_ins", lambda s: s.ui.purge_interval_s, purge_sign_ins
    ),
    PeriodicJob(
        "desired-replicas",
        "headroom.desired_replicas",
        lambda s: s.capacity.desired_interval_s,
        desired_replicas,
    ),
)


def periodic_job(name: str) -> PeriodicJob:
    return next(job for job in PERIODIC_JOBS if job.name == name)
