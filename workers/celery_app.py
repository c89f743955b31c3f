"""The Celery application of the production mode: a Redis broker, tasks and the beat schedule.

Built by a factory (nothing connects at import time). Tasks are thin wrappers over backend
services; each task opens its own unit of work and gets ids, never ORM objects.
"""

from __future__ import annotations

from celery import Celery

from backend.settings import Settings
from workers import tasks


def create_celery(settings: Settings) -> Celery:
    if settings.redis_url is None:
        raise RuntimeError("the worker needs HEADROOM_REDIS_URL (the embedded mode has no worker)")
    app = Celery("headroom", broker=settings.redis_url, backend=None)
    app.conf.update(
        task_ignore_result=True,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # Periodic work is only useful fresh: a trim queued while the worker was down is moot.
        task_default_expires=30,
        beat_schedule={
            "trim-windows": {
                "task": tasks.TRIM_WINDOWS,
                "schedule": settings.window.trim_interval_s,
            },
            "retrain-due": {
                "task": tasks.RETRAIN_DUE,
                "schedule": settings.training.interval_s,
            },
            "purge-sign-ins": {
                "task": tasks.PURGE_SIGN_INS,
                "schedule": settings.ui.purge_interval_s,
            },
        },
    )
    tasks.register(app, settings)
    return app
