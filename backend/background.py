"""Background work of an API process.

Every process keeps its served models fresh: a listener for activation notifications (Redis
pub/sub in production) and a periodic poll as the fallback. In the embedded mode the process
also trims windows and retrains, on the same service functions that Celery workers run in
production (`workers/`), and purges expired console sessions and stale failed sign-ins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from backend.auth.sessions import purge_expired, utcnow
from backend.db import unit_of_work
from backend.deps import Runtime
from backend.registry.locks import LocalLocks
from backend.registry.notify import RedisListener
from backend.registry.trainer import Trainer
from backend.samples.service import trim_all_windows

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
    # Every process serves saturation from its own memory, so every process computes it.
    capacity = Periodic("capacity", settings.capacity.interval_s, runtime.capacity.refresh)
    if settings.redis_url is not None:
        listener = RedisListener(settings.redis_url, runtime.sync).start()
        return Background([poll, capacity], [listener]).start()

    trainer = Trainer(
        runtime.sessions, settings, LocalLocks(), runtime.notifier, failures=runtime.failures
    )

    def trim() -> int:
        with unit_of_work(runtime.sessions) as session:
            return trim_all_windows(session, settings.window.cap)

    def purge() -> tuple[int, int]:
        with unit_of_work(runtime.sessions) as session:
            return purge_expired(session, utcnow(), settings)

    return Background(
        [
            poll,
            capacity,
            Periodic("trim-windows", settings.window.trim_interval_s, trim),
            Periodic("retrain", settings.training.interval_s, trainer.run_once),
            Periodic("purge-sign-ins", settings.ui.purge_interval_s, purge),
        ]
    ).start()
