"""A what-if run that raises in a Celery worker: the record in Redis says failed with the error,
and the console (another process than the worker) shows it."""

from __future__ import annotations

from pathlib import Path

import redis
from fastapi.testclient import TestClient

from backend.whatif.jobs import RedisJobStore
from backend.whatif.runner import WhatIfRunner
from tests.conftest import redis_url_for_tests
from tests.console import console_state, run_failing_whatif, sign_in_new_user
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
        job = run_failing_whatif(client, runner)
    # The worker wrote it where every API replica reads it.
    stored = RedisJobStore(redis_url_for_tests()).load(job.id)
    assert stored is not None and stored.status == "failed" and stored.message == job.message
