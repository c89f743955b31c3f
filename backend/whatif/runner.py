"""What-if: simulate an edited policy against the active one before saving it.

In the embedded mode a background thread of the API process runs a job; in production a Celery
worker does (task `headroom.whatif`, enqueued by name: backend/ never imports workers/). Either
way the same `execute` does the work, on the job record of `backend.whatif.jobs`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from backend.settings import Settings
from backend.tasks import WHATIF, create_celery
from backend.whatif.jobs import JobStore, MemoryJobStore, Progress, RedisJobStore, WhatIfJob
from backend.whatif.simulation import compare_policies

log = logging.getLogger("headroom.whatif")

Simulate = Callable[[WhatIfJob, Progress], dict[str, Any]]


def execute(store: JobStore, job_id: str, simulate: Simulate | None = None) -> None:
    """Run one job to its end, recording progress; a failure is recorded, never raised."""
    job = store.load(job_id)
    if job is None:
        log.warning("job %s not found (expired?)", job_id)
        return
    job.status, job.message = "running", "starting the simulation"
    store.save(job)

    def progress(fraction: float, message: str) -> None:
        job.progress = max(0.0, min(1.0, fraction))
        job.message = message
        store.save(job)

    try:
        job.result = (simulate or compare_policies)(job, progress)
    except Exception as exc:
        log.exception("job %s failed", job_id)
        job.status, job.message = "failed", f"{type(exc).__name__}: {exc}"
    else:
        job.status, job.progress, job.message = "done", 1.0, "finished"
    store.save(job)


class WhatIfRunner:
    """Starts jobs and reads their records."""

    def __init__(self, store: JobStore, launch: Callable[[str], None], stop: Callable[[], None]):
        self.store = store
        self._launch = launch
        self._stop = stop

    def start(
        self,
        *,
        pool: str,
        trace: str,
        requested_by: str,
        candidate: dict[str, Any],
        baseline: dict[str, Any],
        baseline_version: int | None,
        requests: int,
    ) -> WhatIfJob:
        job = WhatIfJob(
            id=uuid.uuid4().hex,
            pool=pool,
            trace=trace,
            requested_by=requested_by,
            candidate=candidate,
            baseline=baseline,
            baseline_version=baseline_version,
            requests=requests,
        )
        self.store.save(job)
        self._launch(job.id)
        return job

    def get(self, job_id: str) -> WhatIfJob | None:
        return self.store.load(job_id)

    def recent(self, pool: str) -> list[WhatIfJob]:
        return self.store.recent(pool)

    def stop(self) -> None:
        self._stop()


def embedded_runner(simulate: Simulate | None = None) -> WhatIfRunner:
    store = MemoryJobStore()
    # One simulation at a time: each is CPU-bound and the API process must keep answering.
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whatif")

    def launch(job_id: str) -> None:
        pool.submit(execute, store, job_id, simulate)

    def stop() -> None:
        pool.shutdown(wait=False, cancel_futures=True)

    return WhatIfRunner(store, launch, stop)


def celery_runner(settings: Settings, task: str = WHATIF, kind: str = "whatif") -> WhatIfRunner:
    assert settings.redis_url is not None
    store = RedisJobStore(settings.redis_url, kind)
    celery = create_celery(settings)

    def launch(job_id: str) -> None:
        # By name: the task's body is the worker's. Not the default 30 s expiry of periodic
        # tasks: a what-if may wait behind training.
        celery.send_task(task, args=[job_id], expires=3600)

    return WhatIfRunner(store, launch, lambda: None)


def make_runner(
    settings: Settings, simulate: Simulate | None = None, task: str = WHATIF, kind: str = "whatif"
) -> WhatIfRunner:
    """A runner for one job family: what-ifs by default, the advisor's with its own simulate,
    Celery task and record prefix (backend/advisor/)."""
    return embedded_runner(simulate) if settings.embedded else celery_runner(settings, task, kind)


def run_in_worker(
    settings: Settings, job_id: str, simulate: Simulate | None = None, kind: str = "whatif"
) -> None:
    """The Celery task's body (production mode): the record lives in Redis."""
    assert settings.redis_url is not None
    execute(RedisJobStore(settings.redis_url, kind), job_id, simulate)
