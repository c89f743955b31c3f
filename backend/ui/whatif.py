"""What-if: simulate an edited policy against the active one before saving it.

A job is a small JSON record (who asked, the two specs, the trace, progress, the result). In the
embedded mode a background thread of the API process runs it and the record lives in memory; in
production a Celery worker runs it (task `headroom.whatif`) and the record lives in Redis, so
every API replica can show its progress. Either way the same `execute` does the work.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from backend.settings import Settings

log = logging.getLogger("headroom.whatif")

Status = Literal["queued", "running", "done", "failed"]
# Records are for looking at the result before saving; a day is plenty.
RECORD_TTL_S = 24 * 3600
RECENT = 10

Progress = Callable[[float, str], None]


@dataclass
class WhatIfJob:
    id: str
    pool: str
    trace: str
    requested_by: str
    candidate: dict[str, Any]
    """The edited policy spec (JSON)."""
    baseline: dict[str, Any]
    """The active policy spec when the job was started (JSON)."""
    baseline_version: int | None
    requests: int
    """How many requests of the trace to replay."""
    status: Status = "queued"
    progress: float = 0.0
    message: str = "waiting for a worker"
    result: dict[str, Any] | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())

    @property
    def finished(self) -> bool:
        return self.status in ("done", "failed")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> WhatIfJob:
        return cls(**json.loads(text))


class JobStore(Protocol):
    def save(self, job: WhatIfJob) -> None: ...
    def load(self, job_id: str) -> WhatIfJob | None: ...
    def recent(self, pool: str) -> list[WhatIfJob]: ...


class MemoryJobStore:
    def __init__(self) -> None:
        self._jobs: dict[str, WhatIfJob] = {}
        self._lock = threading.Lock()

    def save(self, job: WhatIfJob) -> None:
        # A copy: the runner keeps mutating its own object while pages read this one.
        with self._lock:
            self._jobs[job.id] = WhatIfJob.from_json(job.to_json())

    def load(self, job_id: str) -> WhatIfJob | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return WhatIfJob.from_json(job.to_json()) if job else None

    def recent(self, pool: str) -> list[WhatIfJob]:
        with self._lock:
            jobs = [j for j in self._jobs.values() if j.pool == pool]
        return sorted(jobs, key=lambda j: j.created_at, reverse=True)[:RECENT]


class RedisJobStore:
    def __init__(self, url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(url)

    def save(self, job: WhatIfJob) -> None:
        pipe = self._redis.pipeline()
        pipe.set(f"headroom:whatif:{job.id}", job.to_json(), ex=RECORD_TTL_S)
        if job.status == "queued":
            key = f"headroom:whatif:recent:{job.pool}"
            pipe.lpush(key, job.id)
            pipe.ltrim(key, 0, RECENT - 1)
            pipe.expire(key, RECORD_TTL_S)
        pipe.execute()

    def load(self, job_id: str) -> WhatIfJob | None:
        raw = self._redis.get(f"headroom:whatif:{job_id}")
        return WhatIfJob.from_json(raw) if isinstance(raw, bytes | str) else None

    def recent(self, pool: str) -> list[WhatIfJob]:
        ids = self._redis.lrange(f"headroom:whatif:recent:{pool}", 0, RECENT - 1)
        jobs = [self.load(i.decode() if isinstance(i, bytes) else str(i)) for i in ids]
        return [j for j in jobs if j is not None]


Simulate = Callable[[WhatIfJob, Progress], dict[str, Any]]


def execute(store: JobStore, job_id: str, simulate: Simulate | None = None) -> None:
    """Run one job to its end, recording progress; a failure is recorded, never raised."""
    job = store.load(job_id)
    if job is None:
        log.warning("what-if job %s not found (expired?)", job_id)
        return
    job.status, job.message = "running", "starting the simulation"
    store.save(job)

    def progress(fraction: float, message: str) -> None:
        job.progress = max(0.0, min(1.0, fraction))
        job.message = message
        store.save(job)

    try:
        from backend.ui.simulation import compare_policies

        job.result = (simulate or compare_policies)(job, progress)
    except Exception as exc:
        log.exception("what-if job %s failed", job_id)
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


def celery_runner(settings: Settings) -> WhatIfRunner:
    from workers.celery_app import create_celery
    from workers.tasks import WHATIF

    assert settings.redis_url is not None
    store = RedisJobStore(settings.redis_url)
    celery = create_celery(settings)

    def launch(job_id: str) -> None:
        # Not the default 30 s expiry of periodic tasks: a what-if may wait behind training.
        celery.send_task(WHATIF, args=[job_id], expires=3600)

    return WhatIfRunner(store, launch, lambda: None)


def make_runner(settings: Settings) -> WhatIfRunner:
    return embedded_runner() if settings.embedded else celery_runner(settings)


def run_in_worker(settings: Settings, job_id: str) -> None:
    """The Celery task's body (production mode): the record lives in Redis."""
    assert settings.redis_url is not None
    execute(RedisJobStore(settings.redis_url), job_id)
