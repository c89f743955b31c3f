"""Faults against the real servers: PostgreSQL or Redis unreachable, a worker killed while
training, the API killed under continuous ingestion."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import redis
from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from backend.db import make_engine, make_sessionmaker
from backend.registry.locks import RedisLocks
from backend.registry.models import ModelVersion
from backend.registry.notify import RedisNotifier
from backend.registry.trainer import Trainer
from backend.samples.models import Sample
from backend.settings import Settings
from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.conftest import redis_url_for_tests
from tests.faults import TcpProxy
from tests.server import headroom_process, headroom_worker, kill_group

PROFILE = load_profile("a100-llama3-8b")


def rows(n: int, seed: int) -> dict[str, Any]:
    return sample_rows(n, np.random.default_rng(seed), PROFILE)


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def via(proxy: TcpProxy, url: str) -> str:
    return make_url(url).set(host="127.0.0.1", port=proxy.port).render_as_string(False)


@pytest.fixture
def pg_proxy(database_url: str) -> Iterator[TcpProxy]:
    u = make_url(database_url)
    proxy = TcpProxy(u.host or "127.0.0.1", u.port or 5432)
    yield proxy
    proxy.close()


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    u = make_url(redis_url_for_tests())
    proxy = TcpProxy(u.host or "127.0.0.1", u.port or 6379)
    yield proxy
    proxy.close()


def train_now(database_url: str) -> None:
    """One training round by this test process, as a worker would run it."""
    settings = Settings(database_url=database_url, redis_url=redis_url_for_tests())
    engine = make_engine(database_url)
    locks = RedisLocks(redis_url_for_tests(), 30)
    notifier = RedisNotifier(redis_url_for_tests())
    Trainer(make_sessionmaker(engine), settings, locks, notifier).run_once()
    engine.dispose()


def test_postgres_down_predictions_go_on_ingestion_is_503_and_resumes(
    database_url: str, engine: Engine, pg_proxy: TcpProxy, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": via(pg_proxy, database_url),
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
    }
    body = {"requests": prediction_requests(rows(20, seed=1))}
    with headroom_process(env, tmp_path) as (api, _):
        batch = {"entries": training_entries(rows(500, seed=0))}
        assert httpx.post(f"{api}/add_training_data_bulk", json=batch).status_code == 202
        train_now(database_url)
        wait_for(lambda: httpx.get(f"{api}/status").json()["is_ready"], 30, "the model")

        pg_proxy.cut()
        r = httpx.post(f"{api}/predict/bulk/strict", json=body)
        assert r.status_code == 200 and len(r.json()["predictions"]) == 20
        refused = httpx.post(f"{api}/add_training_data_bulk", json=batch, timeout=30)
        assert refused.status_code == 503
        assert "database unavailable" in refused.json()["detail"]
        assert httpx.get(f"{api}/readyz", timeout=30).status_code == 503
        assert httpx.get(f"{api}/healthz").status_code == 200

        pg_proxy.restore()
        wait_for(
            lambda: httpx.post(f"{api}/add_training_data_bulk", json=batch).status_code == 202,
            30,
            "ingestion to resume",
        )
        assert httpx.get(f"{api}/readyz").status_code == 200
    with Session(engine) as s:
        # Two acknowledged batches (1,000 entries: TTFT + TPOT each); the refused one is absent.
        assert s.scalar(select(func.count()).select_from(Sample)) == 2000


def test_redis_down_serving_goes_on_and_polling_brings_new_models(
    database_url: str, redis_proxy: TcpProxy, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": via(redis_proxy, redis_url_for_tests()),
        "HEADROOM_SERVING__POLL_INTERVAL_S": "1",
    }
    body = {"requests": prediction_requests(rows(5, seed=1))}
    with headroom_process(env, tmp_path) as (api, _):
        httpx.post(
            f"{api}/add_training_data_bulk", json={"entries": training_entries(rows(300, 0))}
        )
        train_now(database_url)
        wait_for(lambda: httpx.get(f"{api}/status").json()["is_ready"], 30, "the first model")
        first = httpx.get(f"{api}/status").json()["last_model_load"]

        redis_proxy.cut()
        assert httpx.post(f"{api}/predict/bulk/strict", json=body).status_code == 200
        r = httpx.post(
            f"{api}/add_training_data_bulk", json={"entries": training_entries(rows(300, 5))}
        )
        assert r.status_code == 202  # ingestion needs only PostgreSQL
        train_now(database_url)  # its announcement cannot reach this API: only the poll can
        wait_for(
            lambda: httpx.get(f"{api}/status").json()["last_model_load"] != first,
            30,
            "the poll to load the new model",
        )
        assert httpx.post(f"{api}/predict/bulk/strict", json=body).status_code == 200


def test_training_resumes_when_redis_is_back(
    database_url: str, engine: Engine, redis_proxy: TcpProxy, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": via(redis_proxy, redis_url_for_tests()),
        "HEADROOM_TRAINING__INTERVAL_S": "1",
    }
    worker_log = tmp_path / "worker.log"

    def logged(text: str) -> Callable[[], bool]:
        return lambda: text in worker_log.read_text(errors="replace")

    with headroom_process(env, tmp_path) as (api, _), headroom_worker(env, tmp_path):
        wait_for(logged(" ready."), 60, "the worker to start")
        redis_proxy.cut()
        # The outage as the worker sees it, not a sleep: it has lost its broker.
        wait_for(logged("Connection to broker lost"), 30, "the worker to lose Redis")
        entries = training_entries(rows(300, 0))
        labels = sum((e["actual_ttft_ms"] > 0) + (e["actual_tpot_ms"] > 0) for e in entries)
        r = httpx.post(f"{api}/add_training_data_bulk", json={"entries": entries})
        assert r.status_code == 202
        with Session(engine) as s:
            # Ingestion needs only PostgreSQL: the whole batch is stored during the outage...
            assert s.scalar(select(func.count()).select_from(Sample)) == labels
            # ... and beat's rounds (every second) did not reach the worker.
            assert s.scalar(select(func.count()).select_from(ModelVersion)) == 0
        redis_proxy.restore()
        wait_for(lambda: httpx.get(f"{api}/status").json()["is_ready"], 60, "training to resume")


def test_a_worker_killed_while_training_activates_nothing_and_the_next_run_trains(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    client = redis.Redis.from_url(redis_url_for_tests())
    client.flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_TRAINING__INTERVAL_S": "0.5",
        "HEADROOM_TRAINING__LOCK_TIMEOUT_S": "3",
    }
    # A big window, so that a training takes long enough to be caught in the act.
    big = training_entries(rows(40_000, 0), as_epp=False)
    with headroom_process(env, tmp_path) as (api, _):
        for i in range(0, len(big), 10_000):
            httpx.post(
                f"{api}/add_training_data_bulk", json={"entries": big[i : i + 10_000]}, timeout=60
            )
        with headroom_worker(env, tmp_path) as worker:
            wait_for(lambda: bool(client.keys("headroom:lock:train:*")), 60, "a training to start")
            kill_group(worker)
        with Session(engine) as s:
            assert s.scalar(select(func.count()).select_from(ModelVersion)) == 0
        with headroom_worker(env, tmp_path):
            wait_for(lambda: httpx.get(f"{api}/status").json()["is_ready"], 90, "the next run")
    with Session(engine) as s:
        statuses = s.scalars(select(ModelVersion.status)).all()
    assert "active" in statuses


def test_api_killed_under_continuous_ingestion_loses_no_acknowledged_sample(
    database_url: str, engine: Engine, tmp_path: Path
) -> None:
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_REDIS_URL": redis_url_for_tests()}
    acked: list[int] = []
    stop = threading.Event()
    target: dict[str, str] = {}

    def ingest() -> None:
        i = 0
        while not stop.is_set():
            entries = [{**e, "pod": f"batch-{i}"} for e in training_entries(rows(50, i))]
            try:
                r = httpx.post(
                    f"{target['url']}/add_training_data_bulk", json={"entries": entries}, timeout=5
                )
                if r.status_code == 202:
                    acked.append(i)
            except httpx.HTTPError:
                pass  # the API is down: not acknowledged, the client would retry
            i += 1

    thread = threading.Thread(target=ingest)
    with headroom_process(env, tmp_path) as (api, proc):
        target["url"] = api
        thread.start()
        wait_for(lambda: len(acked) >= 10, 30, "ingestion to run")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with headroom_process(env, tmp_path) as (api, _):
        target["url"] = api
        n = len(acked)
        wait_for(lambda: len(acked) >= n + 10, 30, "ingestion to continue")
        stop.set()
        thread.join()
    with Session(engine) as s:
        stored = dict(s.execute(select(Sample.pod, func.count()).group_by(Sample.pod)).all())
    missing = [i for i in acked if stored.get(f"batch-{i}") != 100]
    assert missing == []
