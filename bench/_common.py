"""Shared by the benchmarks: the machine they ran on, fresh databases, a real server process."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.pg import recreate_database  # noqa: E402
from tests.server import headroom_process  # noqa: E402

__all__ = ["ROOT", "bench_database_url", "headroom_process", "machine", "recreate_database"]


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
