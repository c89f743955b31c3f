"""Celery as the backend sees it: the app factory, its beat schedule and the task names.

The task bodies live in `workers/tasks.py`, which Celery imports in the worker process (the
app's `include`). backend/ never imports workers/ (`python -m backend.tools.layers` checks it):
it enqueues tasks by name (`send_task`), and workers/ depends on backend/, never the reverse.
Built by a factory: nothing connects at import time.
"""

from __future__ import annotations

from typing import cast

from celery import Celery

from backend.periodic import PERIODIC_JOBS
from backend.settings import Settings

TRAIN = "headroom.train"
SIMULATE = "headroom.simulate"
WHATIF = "headroom.whatif"
ADVICE = "headroom.advice"

# Imported by Celery when a worker starts; the API and beat never import them.
WORKER_MODULES = ("workers.tasks",)
SETTINGS_KEY = "headroom_settings"


def create_celery(settings: Settings) -> Celery:
    if settings.redis_url is None:
        raise RuntimeError("the worker needs HEADROOM_REDIS_URL (the embedded mode has no worker)")
    app = Celery("headroom", broker=settings.redis_url, backend=None, include=WORKER_MODULES)
    app.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # Periodic work is only useful fresh: a trim queued while the worker was down is moot.
        task_default_expires=30,
        beat_schedule={
            job.name: {"task": job.task, "schedule": job.interval_s(settings)}
            for job in PERIODIC_JOBS
        },
    )
    app.conf[SETTINGS_KEY] = settings
    return app


def settings_of(app: Celery) -> Settings:
    """The settings the app was made with (tasks read theirs from their app)."""
    return cast(Settings, app.conf[SETTINGS_KEY])
