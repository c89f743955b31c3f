"""Ingestion throughput: `POST /add_training_data_bulk` into PostgreSQL versus raw COPY.

One `headroom serve` process (one uvicorn worker) on loopback, batches of 1,000 upstream-shaped
entries (half TTFT, half TPOT samples, as the EPP sends them). The ceiling is the service's own
binary `COPY` of the very same rows, built ahead, into the same table, one transaction per
1,000, measured in the same run. Prints JSON.

    .venv/bin/python bench/ingest.py [--batches 100]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
from _common import bench_database_url, headroom_process, machine, recreate_database
from sqlalchemy.engine import make_url

from backend import migrate
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.predictor.window import WindowSpec
from backend.samples.schemas import TrainingEntry
from backend.samples.service import build_rows, write_rows
from backend.settings import WindowSettings

BATCH = 1000


def make_entries(n: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        ttft = i % 2 == 0
        out.append(
            {
                "kv_cache_percentage": round(rng.random(), 4),
                "input_token_length": rng.randint(16, 8192),
                "num_request_waiting": rng.randint(0, 20),
                "num_request_running": rng.randint(0, 64),
                "num_tokens_generated": 0 if ttft else rng.randint(1, 2000),
                "actual_ttft_ms": round(rng.uniform(20, 3000), 3) if ttft else 0,
                "actual_tpot_ms": 0 if ttft else round(rng.uniform(5, 80), 3),
                "prefix_cache_score": round(rng.random(), 4),
                "prefill_tokens_in_flight": rng.randint(0, 20000),
                "decode_tokens_in_flight": 0,
                "encoder_input_size": 0,
                "encoder_matched_size": 0,
                "timestamp": "2026-08-20T12:00:00.123456789Z",
            }
        )
    return out


def post_batches(url: str, bodies: list[bytes], clients: int) -> float:
    """Seconds to post every body, spread over `clients` concurrent keep-alive connections."""
    errors: list[str] = []

    def run(part: list[bytes]) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            for body in part:
                r = c.post(
                    "/add_training_data_bulk",
                    content=body,
                    headers={"content-type": "application/json"},
                )
                if r.status_code != 202:
                    errors.append(f"{r.status_code} {r.text[:200]}")

    parts = [bodies[i::clients] for i in range(clients)]
    threads = [threading.Thread(target=run, args=(p,)) for p in parts]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} failed batches, first: {errors[0]}")
    return elapsed


def copy_ceiling(database_url: str, batches: list[list[dict[str, Any]]]) -> float:
    """Seconds to COPY the same rows, one transaction per batch, rows prepared ahead."""
    spec = WindowSpec.from_settings(WindowSettings())
    rng = random.Random(0)
    prepared = [
        build_rows(1, [TrainingEntry.model_validate(e) for e in b], spec, 0.1, rng)[0]
        for b in batches
    ]
    # The service's own write (binary COPY), alone: what storing costs with parsing, validation
    # and HTTP taken away.
    engine = make_engine(database_url)
    sessions = make_sessionmaker(engine)
    try:
        start = time.perf_counter()
        for rows in prepared:
            with unit_of_work(sessions) as session:
                write_rows(session, rows)
        return time.perf_counter() - start
    finally:
        engine.dispose()


def count_rows(database_url: str) -> int:
    u = make_url(database_url).set(drivername="postgresql")
    with psycopg.connect(u.render_as_string(hide_password=False)) as conn:
        row = conn.execute("SELECT count(*) FROM samples").fetchone()
        return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, default=100, help="batches of 1,000 per mode")
    args = parser.parse_args()

    rng = random.Random(42)
    batches = [make_entries(BATCH, rng) for _ in range(args.batches)]
    bodies = [orjson.dumps({"entries": b}) for b in batches]
    n = args.batches * BATCH
    url = bench_database_url("headroom_bench_ingest")
    recreate_database(url)
    migrate.upgrade(url)

    results: dict[str, Any] = {}
    env = {
        "HEADROOM_DATABASE_URL": url,
        # Production mode: no in-process trimmer competing with ingestion in this process.
        "HEADROOM_REDIS_URL": "redis://127.0.0.1:6379/15",
        "HEADROOM_LOG_LEVEL": "warning",
        # The capacity of ingestion from one client, not its per-client rate limit.
        "HEADROOM_INGEST__CLIENT_BYTES_PER_S": "0",
    }
    with tempfile.TemporaryDirectory() as tmp, headroom_process(env, Path(tmp)) as (api, _):
        post_batches(api, bodies[:5], 1)  # warm-up: connections, imports, plan caches
        for clients in (1, 4):
            seconds = post_batches(api, bodies, clients)
            results[f"api_entries_per_s_{clients}_client"] = round(n / seconds)
    stored = count_rows(url)
    ceiling_s = copy_ceiling(url, batches)
    ceiling = n / ceiling_s
    best = max(results.values())
    print(
        json.dumps(
            {
                "benchmark": "ingest",
                "machine": machine(),
                "batch_size": BATCH,
                "entries_per_mode": n,
                "api_workers": 1,
                **results,
                "copy_ceiling_entries_per_s": round(ceiling),
                "api_share_of_ceiling": round(best / ceiling, 3),
                "rows_stored_by_api": stored,
                "targets": {"entries_per_s": 20000, "share_of_ceiling": 0.333},
                "meets_targets": best >= 20000 and best / ceiling >= 1 / 3,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
