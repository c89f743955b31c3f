"""What-if job records and where they live.

A job is a small JSON record (who asked, the two specs, the trace, progress, the result). In the
embedded mode it lives in memory (`MemoryJobStore`); in production in Redis (`RedisJobStore`), so
that every API replica can show the progress of a job that a Celery worker runs.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

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
    """The edited policy spec (JSON); for an advice job, the search's settings."""
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
    def __init__(self, url: str, kind: str = "whatif") -> None:
        """``kind`` keeps each job family's records apart (``whatif``, ``advice``)."""
        import redis

        self._redis = redis.Redis.from_url(url)
        self._prefix = f"headroom:{kind}"

    def save(self, job: WhatIfJob) -> None:
        pipe = self._redis.pipeline()
        pipe.set(f"{self._prefix}:{job.id}", job.to_json(), ex=RECORD_TTL_S)
        if job.status == "queued":
            key = f"{self._prefix}:recent:{job.pool}"
            pipe.lpush(key, job.id)
            pipe.ltrim(key, 0, RECENT - 1)
            pipe.expire(key, RECORD_TTL_S)
        pipe.execute()

    def load(self, job_id: str) -> WhatIfJob | None:
        raw = self._redis.get(f"{self._prefix}:{job_id}")
        return WhatIfJob.from_json(raw) if isinstance(raw, bytes | str) else None

    def recent(self, pool: str) -> list[WhatIfJob]:
        ids = self._redis.lrange(f"{self._prefix}:recent:{pool}", 0, RECENT - 1)
        jobs = [self.load(i.decode() if isinstance(i, bytes) else str(i)) for i in ids]
        return [j for j in jobs if j is not None]
