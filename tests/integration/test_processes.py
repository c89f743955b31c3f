"""The product as users run it: real `headroom serve` processes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import redis

from tests.conftest import redis_url_for_tests
from tests.factories import entry
from tests.server import headroom_process, headroom_worker


def _count(url: str, pool: str = "default") -> int:
    ttft = httpx.get(f"{url}/v1/samples/stats", params={"pool": pool}).json()["targets"]["ttft"]
    return int(ttft["train"] + ttft["test"])


def test_acknowledged_samples_survive_a_killed_server(database_url: str, tmp_path: Path) -> None:
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_REDIS_URL": redis_url_for_tests()}
    with headroom_process(env, tmp_path) as (url, proc):
        for _ in range(5):
            r = httpx.post(f"{url}/add_training_data_bulk", json={"entries": [entry()] * 200})
            assert r.status_code == 202
        proc.send_signal(signal.SIGKILL)  # no graceful shutdown, nothing gets flushed
        proc.wait()
    with headroom_process(env, tmp_path) as (url, _):
        assert _count(url) == 1000


def test_embedded_default_runs_with_no_configuration(tmp_path: Path) -> None:
    """A newcomer's first run: no env at all; SQLite file in the working directory."""
    env = {"HEADROOM_WINDOW__CAP": "20", "HEADROOM_WINDOW__TRIM_INTERVAL_S": "0.2"}
    with headroom_process(env, tmp_path) as (url, _):
        assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
        r = httpx.post(f"{url}/add_training_data_bulk", json={"entries": [entry()] * 100})
        assert r.status_code == 202
        # The in-process trimmer brings the bucket back to its cap.
        deadline = time.monotonic() + 10
        while _count(url) > 20 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _count(url) == 20
        assert httpx.post(f"{url}/v1/pools", json={"name": "p2"}).status_code == 201
    assert (tmp_path / "headroom.db").exists()
    with headroom_process({}, tmp_path) as (url, _):
        assert _count(url) == 20
        assert [p["name"] for p in httpx.get(f"{url}/v1/pools").json()] == ["default", "p2"]


def test_celery_worker_and_beat_trim_the_window_in_production_mode(
    database_url: str, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_WINDOW__CAP": "30",
        "HEADROOM_WINDOW__TRIM_INTERVAL_S": "0.5",
    }
    with headroom_process(env, tmp_path) as (url, _):
        r = httpx.post(f"{url}/add_training_data_bulk", json={"entries": [entry()] * 300})
        assert r.status_code == 202
        assert _count(url) == 300  # the API itself never trims in production mode
        with headroom_worker(env, tmp_path):
            deadline = time.monotonic() + 60
            while _count(url) > 30 and time.monotonic() < deadline:
                time.sleep(0.2)
        assert _count(url) == 30, (tmp_path / "worker.log").read_text()[-3000:]
