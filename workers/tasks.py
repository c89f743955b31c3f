"""Celery tasks: each one a thin wrapper over a backend service function."""

from __future__ import annotations

from functools import cache

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.registry.failures import RedisFailures
from backend.registry.locks import RedisLocks
from backend.registry.notify import RedisNotifier
from backend.registry.trainer import Trainer
from backend.samples.models import Target
from backend.samples.service import trim_all_windows
from backend.settings import Settings

TRIM_WINDOWS = "headroom.trim_windows"
RETRAIN_DUE = "headroom.retrain_due"
TRAIN = "headroom.train"


@cache
def _sessions(database_url: str) -> sessionmaker[Session]:
    # One engine per worker process, made on first use (after the fork, never at import).
    return make_sessionmaker(make_engine(database_url))


def register(app: Celery, settings: Settings) -> None:
    @cache
    def _trainer() -> Trainer:
        # One per worker process: it remembers which models it found stored at start.
        assert settings.redis_url is not None
        return Trainer(
            _sessions(settings.database_url),
            settings,
            RedisLocks(settings.redis_url, settings.training.lock_timeout_s),
            RedisNotifier(settings.redis_url),
            failures=RedisFailures(settings.redis_url),
        )

    @app.task(name=TRIM_WINDOWS)  # type: ignore[untyped-decorator]
    def trim_windows() -> int:
        """Bring every window back to its per-bucket cap."""
        with unit_of_work(_sessions(settings.database_url)) as session:
            return trim_all_windows(session, settings.window.cap)

    @app.task(name=TRAIN)  # type: ignore[untyped-decorator]
    def train(pool_id: int, target: str) -> dict[str, object]:
        """Train one (pool, target); the Redis lock makes a concurrent duplicate a no-op."""
        outcome = _trainer().train(pool_id, Target.from_label(target))
        return {"status": outcome.status, "reason": outcome.reason, "version": outcome.version_id}

    @app.task(name=RETRAIN_DUE)  # type: ignore[untyped-decorator]
    def retrain_due() -> int:
        """Fan out one training task per (pool, target) with new samples."""
        due = _trainer().due()
        for pool_id, target in due:
            train.delay(pool_id, target.label)
        return len(due)
