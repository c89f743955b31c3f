"""Periodic work that the embedded mode runs inside the API process.

In production the same service functions run as Celery tasks scheduled by beat
(`workers/`), and the API process starts nothing here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from backend.db import unit_of_work
from backend.deps import Runtime
from backend.samples.service import trim_all_windows

log = logging.getLogger("headroom.background")


@dataclass
class Periodic:
    name: str
    interval_s: float
    run: Callable[[], object]


@dataclass
class Background:
    jobs: list[Periodic]
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
        for thread in self._threads:
            thread.join(timeout=10)


def trim_job(runtime: Runtime) -> Periodic:
    def run() -> int:
        with unit_of_work(runtime.sessions) as session:
            return trim_all_windows(session, runtime.settings.window.cap)

    return Periodic("trim-windows", runtime.settings.window.trim_interval_s, run)


def start_background(runtime: Runtime) -> Background:
    if not runtime.settings.embedded:
        return Background([])
    return Background([trim_job(runtime)]).start()
