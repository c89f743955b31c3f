"""One table of periodic jobs: Celery beat's schedule, the worker's tasks and the embedded
mode's threads all come from it."""

from __future__ import annotations

from pathlib import Path

from backend import migrate
from backend.background import start_background
from backend.db import make_engine, make_sessionmaker
from backend.deps import Runtime
from backend.periodic import PERIODIC_JOBS
from backend.settings import (
    CapacitySettings,
    Settings,
    TrainingSettings,
    UISettings,
    WindowSettings,
)
from backend.tasks import create_celery


def test_beat_schedules_every_job_of_the_table_at_its_setting_and_the_worker_runs_it() -> None:
    settings = Settings(
        redis_url="redis://127.0.0.1:1/0",  # nothing connects
        window=WindowSettings(trim_interval_s=7),
        training=TrainingSettings(interval_s=13),
        ui=UISettings(purge_interval_s=29),
        capacity=CapacitySettings(desired_interval_s=31),
    )
    app = create_celery(settings)
    assert app.conf.beat_schedule == {
        "trim-windows": {"task": "headroom.trim_windows", "schedule": 7},
        "retrain": {"task": "headroom.retrain_due", "schedule": 13},
        "purge-sign-ins": {"task": "headroom.purge_sign_ins", "schedule": 29},
        "desired-replicas": {"task": "headroom.desired_replicas", "schedule": 31},
    }
    assert [job.name for job in PERIODIC_JOBS] == list(app.conf.beat_schedule)
    app.loader.import_default_modules()  # what a worker's start loads
    assert {job.task for job in PERIODIC_JOBS} <= set(app.tasks)


def test_the_embedded_mode_runs_every_job_of_the_table_at_its_setting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'periodic.db'}"
    migrate.upgrade(url)
    settings = Settings(database_url=url, window=WindowSettings(trim_interval_s=7))
    engine = make_engine(url)
    background = start_background(Runtime(settings, engine, make_sessionmaker(engine)))
    try:
        jobs = {job.name: job for job in background.jobs}
        # Per process, in every mode: the served models and the saturation they give.
        assert list(jobs) == ["model-poll", "capacity", *(job.name for job in PERIODIC_JOBS)]
        assert jobs["trim-windows"].interval_s == 7
        assert jobs["purge-sign-ins"].run() == (0, 0)  # the service function, on this database
        assert jobs["desired-replicas"].interval_s == 30  # the default: every 30 s
        assert jobs["desired-replicas"].run() == 0  # no pool, nothing computed
    finally:
        background.stop()
        engine.dispose()
