"""Celery tasks: each one a thin wrapper over a backend service function.

Celery imports this module when a worker starts (the `include` of `backend.tasks.create_celery`);
`shared_task` registers each task on every app of the process, which reads the settings it was
made with (`backend.tasks.settings_of`). Each task opens its own unit of work and gets ids, never
ORM objects. The periodic ones come from the one table of `backend/periodic.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from celery import Task, shared_task
from sqlalchemy.orm import Session, sessionmaker

from backend.advisor import service as advisor
from backend.db import make_engine, make_sessionmaker
from backend.periodic import PERIODIC_JOBS, JobContext, PeriodicJob
from backend.registry.failures import RedisFailures
from backend.registry.locks import RedisLocks
from backend.registry.notify import RedisNotifier
from backend.registry.trainer import Trainer
from backend.samples.models import TargetCode
from backend.settings import Settings
from backend.tasks import ADVICE, SIMULATE, TRAIN, WHATIF, settings_of
from backend.whatif.runner import run_in_worker

TaskFunction = TypeVar("TaskFunction", bound=Callable[..., object])


def celery_task(name: str, **options: Any) -> Callable[[TaskFunction], TaskFunction]:
    """Register the function as the bound task `name` on every Celery app of the process; the
    module keeps the plain function (typed, and callable as it is)."""

    def register(function: TaskFunction) -> TaskFunction:
        shared_task(name=name, bind=True, **options)(function)
        return function

    return register


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


def _context(task: Task) -> JobContext:
    settings = settings_of(task.app)

    def enqueue_training(pool_id: int, target: TargetCode) -> None:
        # One task per target, so that the workers share a round of training.
        task.app.tasks[TRAIN].delay(pool_id, target.label)

    return JobContext(
        settings, _sessions(settings.database_url), _trainer(settings), enqueue_training
    )


def _periodic_task(job: PeriodicJob) -> Callable[[Task], object]:
    def run(task: Task) -> object:
        return job.run(_context(task))

    run.__name__ = run.__qualname__ = job.task.rpartition(".")[2]
    run.__doc__ = job.run.__doc__
    return run


PERIODIC_TASKS = {job.task: celery_task(job.task)(_periodic_task(job)) for job in PERIODIC_JOBS}


@celery_task(TRAIN)
def train(self: Task, pool_id: int, target: str) -> dict[str, object]:
    """Train one (pool, target); the Redis lock makes a concurrent duplicate a no-op."""
    outcome = _trainer(settings_of(self.app)).train(pool_id, TargetCode.from_label(target))
    return {"status": outcome.status, "reason": outcome.reason, "version": outcome.version_id}


@celery_task(WHATIF)
def whatif(self: Task, job_id: str) -> None:
    """Simulate an edited policy against the active one, for the console (backend/whatif/: the
    job record, its progress and its result live in Redis, where every replica reads them)."""
    run_in_worker(settings_of(self.app), job_id)


@celery_task(ADVICE)
def advice(self: Task, job_id: str) -> None:
    """Search the routing configs an EPP can express for a pool (backend/advisor/: the record,
    its progress and its ranking live in Redis, where every replica reads them)."""
    settings = settings_of(self.app)
    advisor.run_in_worker(settings, _sessions(settings.database_url), job_id)


@celery_task(SIMULATE, ignore_result=False)
def simulate(self: Task, **options: Any) -> dict[str, Any]:
    """Run the routing benchmark (``headroom bench``'s options as keywords, ``out_dir`` to also
    write the table and plots there) and return its JSON."""
    from backend.sim.bench import BenchConfig, run_bench, write_outputs

    out_dir = options.pop("out_dir", None)
    data = run_bench(BenchConfig.from_dict(options))
    if out_dir:
        write_outputs(data, Path(out_dir))
    return data
