"""Ingestion helper processes (production mode): they fail and end without losing a batch."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import redis_url_for_tests
from tests.factories import entry
from tests.server import headroom_process


def _helpers(server_pid: int) -> list[int]:
    """Pids of the server's ingestion helpers (spawned children running multiprocessing)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ppid_line = next(line for line in status.splitlines() if line.startswith("PPid:"))
        ppid = int(ppid_line.split()[1])
        if ppid == server_pid and b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
            out.append(int(pid))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


def _count(url: str) -> int:
    ttft = httpx.get(f"{url}/v1/samples/stats").json()["targets"]["ttft"]
    return int(ttft["train"] + ttft["test"])


def _post(url: str, n: int) -> httpx.Response:
    return httpx.post(f"{url}/add_training_data_bulk", json={"entries": [entry()] * n}, timeout=30)


@pytest.fixture
def env(database_url: str) -> dict[str, str]:
    return {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_INGEST__PROCESSES": "1",
    }


def test_a_killed_helper_is_replaced_and_nothing_is_lost(
    env: dict[str, str], tmp_path: Path
) -> None:
    with headroom_process(env, tmp_path) as (url, proc):
        assert _post(url, 100).status_code == 202
        (helper,) = _helpers(proc.pid)
        os.kill(helper, signal.SIGKILL)
        answers = [_post(url, 100).status_code for _ in range(5)]
        # The batch that met the dead helper gets a 503 (retry; nothing of it stored), and a
        # new helper takes the next ones.
        assert set(answers) <= {202, 503}
        assert answers.count(503) <= 1
        assert answers[-1] == 202
        assert _count(url) == 100 * (1 + answers.count(202))
        (replacement,) = _helpers(proc.pid)
        assert replacement != helper


def test_helpers_end_with_the_api_process_even_when_it_is_killed(
    env: dict[str, str], tmp_path: Path
) -> None:
    with headroom_process(env, tmp_path) as (url, proc):
        assert _post(url, 10).status_code == 202
        helpers = _helpers(proc.pid)
        assert helpers
        proc.send_signal(signal.SIGKILL)  # no shutdown code runs in the API process
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in helpers)
