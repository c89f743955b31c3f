"""Shared by the benchmarks: the machine they ran on, fresh databases, a real server process."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pg import recreate_database  # noqa: E402
from tests.server import headroom_process  # noqa: E402

__all__ = [
    "ROOT",
    "bench_database_url",
    "headroom_process",
    "machine",
    "mean_min_max",
    "recreate_database",
    "trained_server",
]


def machine() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def bench_database_url(name: str) -> str:
    base = os.environ.get(
        "HEADROOM_BENCH_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/headroom_bench"
    )
    return base.rsplit("/", 1)[0] + f"/{name}"


@contextmanager
def trained_server(tmp: Path, samples: int = 5000) -> Iterator[str]:
    """`headroom serve` (embedded mode, one worker) trained on profile-shaped samples posted
    as the EPP posts them; yields its URL once both models are served."""
    import time

    import httpx
    import numpy as np

    from backend.sim.entries import training_entries
    from backend.sim.gpu import load_profile
    from backend.sim.latency import sample_rows

    rows = sample_rows(samples, np.random.default_rng(0), load_profile("a100-llama3-8b"))
    env = {"HEADROOM_LOG_LEVEL": "warning", "HEADROOM_TRAINING__INTERVAL_S": "1"}
    with headroom_process(env, tmp) as (url, _):
        entries = training_entries(rows)
        for i in range(0, len(entries), 5000):
            httpx.post(f"{url}/add_training_data_bulk", json={"entries": entries[i : i + 5000]})
        deadline = time.monotonic() + 120
        while not httpx.get(f"{url}/status").json()["models_exist"]["tpot_model"]:
            if time.monotonic() > deadline:
                raise TimeoutError("models were not trained")
            time.sleep(0.2)
        yield url


def mean_min_max(values: list[float], digits: int = 4) -> dict[str, float]:
    """A figure over seeds: its mean and its spread."""
    return {
        "mean": round(sum(values) / len(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }
