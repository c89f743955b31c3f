"""A what-if run that raises in a Celery worker: the record in Redis says failed with the error,
and the console (another process than the worker) shows it."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from backend.whatif.runner import WhatIfRunner
from tests.conftest import redis_url_for_tests
from tests.console import (
    RETIRED,
    assert_shown_as_failed,
    console_state,
    finished,
    sign_in_new_user,
    start_whatif,
)
from tests.server import headroom_worker


def test_a_run_failing_in_the_worker_is_recorded_and_shown(
    client: TestClient, database_url: str, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_REDIS_URL": redis_url_for_tests()}
    sign_in_new_user(client, "ada")
    runner = console_state(client).whatif
    assert isinstance(runner, WhatIfRunner)
    with headroom_worker(env, tmp_path, args=()):
        job = finished(runner, start_whatif(runner, RETIRED).id)
    assert job.status == "failed"
    assert job.message.startswith("KeyError:") and RETIRED in job.message
    assert_shown_as_failed(client, job)
