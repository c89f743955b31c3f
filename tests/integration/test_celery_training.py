"""Production mode end to end: API processes, Celery workers and beat, PostgreSQL, Redis."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from backend.registry.models import ModelVersion
from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.conftest import redis_url_for_tests
from tests.server import headroom_process, headroom_worker

PROFILE = load_profile("a100-llama3-8b")


def _env(database_url: str, **extra: str) -> dict[str, str]:
    return {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_TRAINING__INTERVAL_S": "1",
        **extra,
    }


def _post_samples(url: str, n: int, seed: int) -> None:
    rows = sample_rows(n, np.random.default_rng(seed), PROFILE)
    r = httpx.post(f"{url}/add_training_data_bulk", json={"entries": training_entries(rows)})
    assert r.status_code == 202


def _wait(check: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_worker_trains_and_a_second_api_serves_the_model_without_restart(
    database_url: str, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    # Replica B polls only once an hour: only the pub/sub notification can reach it in time.
    with (
        headroom_process(_env(database_url), tmp_path) as (api_a, _),
        headroom_process(
            _env(database_url, HEADROOM_SERVING__POLL_INTERVAL_S="3600"), tmp_path
        ) as (api_b, _),
    ):
        body = {"requests": prediction_requests(sample_rows(5, np.random.default_rng(1), PROFILE))}
        assert httpx.post(f"{api_b}/predict/bulk/strict", json=body).status_code == 503
        _post_samples(api_a, 1000, seed=0)
        with headroom_worker(_env(database_url), tmp_path):
            _wait(
                lambda: httpx.get(f"{api_b}/status").json()["models_exist"]["tpot_model"],
                60,
                "replica B to serve the new models",
            )
        r = httpx.post(f"{api_b}/predict/bulk/strict", json=body)
        assert r.status_code == 200
        assert len(r.json()["predictions"]) == 5
        versions = httpx.get(f"{api_a}/v1/models").json()
        assert {(v["target"], v["status"]) for v in versions} == {
            ("ttft", "active"),
            ("tpot", "active"),
        }


def test_two_workers_never_train_the_same_target_at_once(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = _env(database_url, HEADROOM_TRAINING__INTERVAL_S="0.3")
    with (
        headroom_process(env, tmp_path) as (api, _),
        headroom_worker(env, tmp_path, args=("--beat",)),
        headroom_worker(env, tmp_path, args=()),
    ):
        # Keep the windows changing so that both workers keep getting training tasks, until
        # six versions exist: a fixed number of posts could all land before slow-starting
        # workers are up, and an unchanged window trains nothing new.
        seed = 0

        def post_and_count() -> bool:
            nonlocal seed
            _post_samples(api, 300, seed=seed)
            seed += 1
            time.sleep(0.4)
            return len(httpx.get(f"{api}/v1/models").json()) >= 6

        _wait(post_and_count, 90, "retrains")
    with Session(engine) as s:
        versions = s.scalars(
            select(ModelVersion).order_by(ModelVersion.target, ModelVersion.training_started_at)
        ).all()
    by_target: dict[int, list[ModelVersion]] = {}
    for v in versions:
        by_target.setdefault(v.target, []).append(v)
    for runs in by_target.values():
        for earlier, later in itertools.pairwise(runs):
            # A training holds its lock from before it starts until after its row is stored.
            assert later.training_started_at >= earlier.created_at, (earlier.id, later.id)
