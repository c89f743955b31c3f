"""Ingestion helper processes (production mode): they fail and end without losing a batch."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from backend.capacity import helper as capacity_helper
from backend.samples import offload
from tests.conftest import redis_url_for_tests
from tests.factories import entry
from tests.server import headroom_process


def _helpers(server_pid: int, niceness: int | None = offload.NICENESS) -> list[int]:
    """Pids of the server's helper processes (spawned children running multiprocessing): the
    ingestion ones by default, told apart by their CPU priority; ``niceness=None`` every one,
    the saturation helper's too (its own priority, ``backend.capacity.helper.NICENESS``)."""
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
        spawned = b"multiprocessing" in cmdline and b"spawn_main" in cmdline
        if ppid == server_pid and spawned and niceness in (None, _nice(int(pid))):
            out.append(int(pid))
    return out


def _nice(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[16])  # the 19th field; the name may hold spaces


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
        "HEADROOM_CAPACITY__HELPER_PROCESS": "true",  # as users run it: both kinds of helper
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
        # The ingestion helper and the saturation helper, both spawned at start-up.
        helpers = _helpers(proc.pid, niceness=None)
        assert len(helpers) == 2 and len(_helpers(proc.pid)) == 1
        assert len(_helpers(proc.pid, niceness=capacity_helper.NICENESS)) == 1
        proc.send_signal(signal.SIGKILL)  # no shutdown code runs in the API process
        proc.wait()
        # Each helper's watch looks every second; the saturation helper runs niced, so on a
        # box whose cores are busy it can wait long for its turn (a CI run beside two
        # simulations took over 30 s): the bound is generous, the check is that they end.
        deadline = time.monotonic() + 90
        while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in helpers)
