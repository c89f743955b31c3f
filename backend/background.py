"""Background work of an API process.

Every process keeps its served models fresh: a listener for activation notifications (Redis
pub/sub in production) and a periodic poll as the fallback. Every process serves saturation
from memory, computed by its helper process (``backend/capacity/helper.py``) or a thread. In
the embedded mode the process also runs the periodic jobs of `backend/periodic.py` (trim
windows, retrain, purge expired console sessions and stale failed sign-ins), the table that
Celery beat reads in production.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from backend.capacity.helper import CapacityHelper
from backend.deps import Runtime
from backend.periodic import PERIODIC_JOBS, JobContext
from backend.registry.locks import LocalLocks
from backend.registry.notify import RedisListener
from backend.registry.trainer import Trainer

log = logging.getLogger("headroom.background")


class Stoppable(Protocol):
    def stop(self) -> None: ...


@dataclass
class Periodic:
    name: str
    interval_s: float
    run: Callable[[], object]


@dataclass
class Background:
    jobs: list[Periodic]
    others: list[Stoppable] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Background:
        for job in self.jobs:
            thread = threading.Thread(target=self._loop, args=(job,), name=job.name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _loop(self, job: Periodic) -> None:
        while not self._stop.wait(job.interval_s):
            try:
                job.run()
            except Exception:  # a failed round must not end the loop; the next one retries
                log.exception("background job %s failed", job.name)

    def stop(self) -> None:
        self._stop.set()
        for other in self.others:
            other.stop()
        for thread in self._threads:
            thread.join(timeout=10)


def start_background(runtime: Runtime) -> Background:
    settings = runtime.settings
    runtime.sync()  # serve whatever is active before the first request
    poll = Periodic("model-poll", settings.serving.poll_interval_s, runtime.sync)
    # Every process serves saturation from its own memory: computed by its helper process (out
    # of the predictions' GIL; with Redis, one elected helper computes for every replica), or
    # by a thread here.
    ticks: list[Periodic] = []
    helpers: list[Stoppable] = []
    if settings.capacity.helper_process:
        runtime.capacity_helper = CapacityHelper(settings, runtime.capacity).start()
        helpers.append(runtime.capacity_helper)
    else:
        ticks.append(Periodic("capacity", settings.capacity.interval_s, runtime.capacity.refresh))
    if settings.redis_url is not None:
        listener = RedisListener(settings.redis_url, runtime.sync).start()
        return Background([poll, *ticks], [*helpers, listener]).start()

    # Embedded mode: the periodic jobs that Celery beat schedules in production, run here.
    trainer = Trainer(
        runtime.sessions, settings, LocalLocks(), runtime.notifier, failures=runtime.failures
    )
    context = JobContext(settings, runtime.sessions, trainer, trainer.train)
    jobs = [
        Periodic(job.name, job.interval_s(settings), functools.partial(job.run, context))
        for job in PERIODIC_JOBS
    ]
    return Background([poll, *ticks, *jobs], helpers).start()
