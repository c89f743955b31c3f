"""Celery tasks: each one a thin wrapper over a backend service function.

The task functions live at module level and read the settings from their app (`register` puts
them in `app.conf`), so that registering them on several apps in one process (tests, the
console's what-if) registers the same callables, not look-alike closures.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from celery import Celery, Task
from sqlalchemy.orm import Session, sessionmaker

from backend.auth.sessions import purge_expired, utcnow
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.registry.failures import RedisFailures
from backend.registry.locks import RedisLocks
from backend.registry.notify import RedisNotifier
from backend.registry.trainer import Trainer
from backend.samples.models import TargetCode
from backend.samples.service import trim_all_windows
from backend.settings import Settings

TRIM_WINDOWS = "headroom.trim_windows"
RETRAIN_DUE = "headroom.retrain_due"
TRAIN = "headroom.train"
SIMULATE = "headroom.simulate"
PURGE_SIGN_INS = "headroom.purge_sign_ins"
WHATIF = "headroom.whatif"

_SETTINGS_KEY = "headroom_settings"


def _settings(task: Task) -> Settings:
    settings: Settings = task.app.conf[_SETTINGS_KEY]
    return settings


@cache
def _sessions(database_url: str) -> sessionmaker[Session]:
    # One engine per worker process, made on first use (after the fork, never at import).
    return make_sessionmaker(make_engine(database_url))


_trainers: dict[int, Trainer] = {}


def _trainer(settings: Settings) -> Trainer:
    # One per worker process and app: it remembers which models it found stored at start.
    trainer = _trainers.get(id(settings))
    if trainer is None:
        assert settings.redis_url is not None
        trainer = Trainer(
            _sessions(settings.database_url),
            settings,
            RedisLocks(settings.redis_url, settings.training.lock_timeout_s),
            RedisNotifier(settings.redis_url),
            failures=RedisFailures(settings.redis_url),
        )
        _trainers[id(settings)] = trainer
    return trainer


def trim_windows(task: Task) -> int:
    """Bring every window back to its per-bucket cap."""
    settings = _settings(task)
    with unit_of_work(_sessions(settings.database_url)) as session:
        return trim_all_windows(session, settings.window.cap)


def purge_sign_ins(task: Task) -> list[int]:
    """Delete expired console sessions and failed sign-ins older than the limit's window."""
    settings = _settings(task)
    with unit_of_work(_sessions(settings.database_url)) as session:
        return list(purge_expired(session, utcnow(), settings))


def train(task: Task, pool_id: int, target: str) -> dict[str, object]:
    """Train one (pool, target); the Redis lock makes a concurrent duplicate a no-op."""
    outcome = _trainer(_settings(task)).train(pool_id, TargetCode.from_label(target))
    return {"status": outcome.status, "reason": outcome.reason, "version": outcome.version_id}


def retrain_due(task: Task) -> int:
    """Fan out one training task per (pool, target) with new samples."""
    due = _trainer(_settings(task)).due()
    for pool_id, target in due:
        task.app.tasks[TRAIN].delay(pool_id, target.label)
    return len(due)


def whatif(task: Task, job_id: str) -> None:
    """Simulate an edited policy against the active one, for the console (backend/ui/whatif.py:
    the job record, its progress and its result live in Redis, where every replica reads them)."""
    from backend.ui.whatif import run_in_worker

    run_in_worker(_settings(task), job_id)


def simulate(task: Task, **options: Any) -> dict[str, Any]:
    """Run the routing benchmark (``headroom bench``'s options as keywords, ``out_dir`` to also
    write the table and plots there) and return its JSON."""
    from backend.sim.bench import BenchConfig, run_bench, write_outputs

    out_dir = options.pop("out_dir", None)
    data = run_bench(BenchConfig.from_dict(options))
    if out_dir:
        write_outputs(data, Path(out_dir))
    return data


def register(app: Celery, settings: Settings) -> None:
    app.conf[_SETTINGS_KEY] = settings
    for name, function, extra in (
        (TRIM_WINDOWS, trim_windows, {}),
        (PURGE_SIGN_INS, purge_sign_ins, {}),
        (RETRAIN_DUE, retrain_due, {}),
        (TRAIN, train, {}),
        (WHATIF, whatif, {}),
        (SIMULATE, simulate, {"ignore_result": False}),
    ):
        app.task(name=name, bind=True, **extra)(function)
