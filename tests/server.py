"""Run `headroom serve` as a real child process, as a user would."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

# Production mode refuses to start without a shared console session key; tests use this one.
TEST_SESSION_SECRET = "test-only-session-secret-0123456789abcdef"


# Settings the suite gives every server it starts (tests/conftest.py sets them; a benchmark,
# which sets none, runs the product's defaults): saturation in a thread of the server unless a
# test asks for the helper process, whose imports cost seconds of CPU per server, two dozen
# servers a run on 2 cores (test_capacity_helper and test_ingest_helpers run the helper).
_PASSED_ON = ("HEADROOM_CAPACITY__HELPER_PROCESS",)


def _env(env: dict[str, str]) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_") or k in _PASSED_ON}
    full["HEADROOM_UI__SESSION_SECRET"] = TEST_SESSION_SECRET
    full.update(env)
    return full


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def headroom_process(
    env: dict[str, str], cwd: Path, args: tuple[str, ...] = ()
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    full_env = _env(env)
    exe = Path(sys.executable).with_name("headroom")
    log = open(cwd / f"serve-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [str(exe), "serve", "--port", str(port), *args],
        cwd=cwd,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError((cwd / f"serve-{port}.log").read_text())
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("headroom serve did not become ready")
            time.sleep(0.1)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


@contextmanager
def headroom_worker(
    env: dict[str, str], cwd: Path, args: tuple[str, ...] = ("--beat",)
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker (and beat) started by `headroom worker`."""
    full_env = _env(env)
    exe = Path(sys.executable).with_name("headroom")
    log = open(cwd / "worker.log", "wb")  # noqa: SIM115 - closed below
    # Its own process group: Celery's pool children must go with it, even after a SIGKILL.
    proc = subprocess.Popen(
        [str(exe), "worker", "--concurrency=1", *args],
        cwd=cwd,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        log.close()


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker and its pool children at once, as an OOM kill or node loss would."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
