"""Sustained load on one API process: bulk-strict predictions mixed with ingestion.

One `headroom serve` (one uvicorn worker, production mode: PostgreSQL + Redis) is trained,
then driven open-loop for `--seconds`: `--rate` `POST /predict/bulk/strict` calls per second
of 100 rows each, spread over several client processes, plus `--ingest-rate` calls per second
of 1,000 entries to `POST /add_training_data_bulk`. Latency is measured from each call's
scheduled send time (so a stalled server cannot hide behind a slowed client: no coordinated
omission). Prints JSON: achieved rates, errors, p50/p90/p99/max per kind.

    .venv/bin/python bench/load.py [--seconds 60] [--rate 500] [--ingest-rate 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from _common import bench_database_url, headroom_process, machine, recreate_database

from backend import migrate
from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

REDIS_URL = "redis://127.0.0.1:6379/12"


def _drive(
    url: str,
    path: str,
    bodies: list[bytes],
    rate: float,
    start: float,
    seconds: float,
    ok_status: int,
    out: Any,
) -> None:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies: list[float] = []
    errors = 0
    n = int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        pause = due - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        try:
            conn.request(
                "POST", path, bodies[i % len(bodies)], {"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            response.read()
            if response.status != ok_status:
                errors += 1
        except (OSError, http.client.HTTPException):
            errors += 1
            conn = http.client.HTTPConnection(host, int(port), timeout=30)
        latencies.append((time.perf_counter() - due) * 1000)
    out.put((path, latencies, errors))


def _summary(latencies: list[float], errors: int, seconds: float) -> dict[str, Any]:
    a = np.array(latencies)
    return {
        "calls": len(a),
        "achieved_per_s": round(len(a) / seconds, 1),
        "errors": errors,
        "p50_ms": round(float(np.percentile(a, 50)), 3),
        "p90_ms": round(float(np.percentile(a, 90)), 3),
        "p99_ms": round(float(np.percentile(a, 99)), 3),
        "max_ms": round(float(a.max()), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=float, default=500, help="bulk-strict calls per second")
    parser.add_argument("--ingest-rate", type=float, default=20, help="ingest calls per second")
    parser.add_argument("--clients", type=int, default=4, help="prediction client processes")
    args = parser.parse_args()

    profile = load_profile("a100-llama3-8b")
    rng = np.random.default_rng(0)
    predict_bodies = [
        orjson.dumps({"requests": prediction_requests(sample_rows(100, rng, profile))})
        for _ in range(20)
    ]
    ingest_bodies = [
        orjson.dumps({"entries": training_entries(sample_rows(500, rng, profile))})
        for _ in range(10)
    ]
    url_db = bench_database_url("headroom_bench_load")
    recreate_database(url_db)
    migrate.upgrade(url_db)
    env = {
        "HEADROOM_DATABASE_URL": url_db,
        "HEADROOM_REDIS_URL": REDIS_URL,
        "HEADROOM_LOG_LEVEL": "warning",
    }
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, headroom_process(env, Path(tmp)) as (url, _):
        _train(url, url_db, ingest_bodies[0])
        queue: Any = ctx.Queue()
        start = time.perf_counter() + 2.0  # let every process start before the clock runs
        procs = [
            ctx.Process(
                target=_drive,
                args=(
                    url,
                    "/predict/bulk/strict",
                    predict_bodies,
                    args.rate / args.clients,
                    start + k / args.rate,
                    args.seconds,
                    200,
                    queue,
                ),
            )
            for k in range(args.clients)
        ]
        procs.append(
            ctx.Process(
                target=_drive,
                args=(
                    url,
                    "/add_training_data_bulk",
                    ingest_bodies,
                    args.ingest_rate,
                    start,
                    args.seconds,
                    202,
                    queue,
                ),
            )
        )
        for p in procs:
            p.start()
        results: dict[str, tuple[list[float], int]] = {}
        for _ in procs:
            path, lat, err = queue.get()
            prev = results.get(path, ([], 0))
            results[path] = (prev[0] + lat, prev[1] + err)
        for p in procs:
            p.join()
    predict = _summary(*results["/predict/bulk/strict"], args.seconds)
    ingest = _summary(*results["/add_training_data_bulk"], args.seconds)
    print(
        json.dumps(
            {
                "benchmark": "load",
                "machine": machine(),
                "api_workers": 1,
                "seconds": args.seconds,
                "predict_rows_per_call": 100,
                "ingest_entries_per_call": 1000,
                "target_rate_per_s": {"predict": args.rate, "ingest": args.ingest_rate},
                "predict": predict,
                "ingest": ingest,
                "targets": {"errors": 0, "predict_p99_ms": 20.0},
                "meets_targets": predict["errors"] == 0
                and ingest["errors"] == 0
                and predict["p99_ms"] <= 20.0
                and predict["achieved_per_s"] >= 0.98 * args.rate,
            },
            indent=2,
        )
    )


def _train(url: str, database_url: str, body: bytes) -> None:
    """Samples in, one training round by this process (as a worker would), model served."""
    import httpx

    from backend.db import make_engine, make_sessionmaker
    from backend.registry.locks import LocalLocks
    from backend.registry.notify import RedisNotifier
    from backend.registry.trainer import Trainer
    from backend.settings import Settings

    httpx.post(
        f"{url}/add_training_data_bulk", content=body, headers={"content-type": "application/json"}
    ).raise_for_status()
    engine = make_engine(database_url)
    settings = Settings(database_url=database_url, redis_url=REDIS_URL)
    Trainer(make_sessionmaker(engine), settings, LocalLocks(), RedisNotifier(REDIS_URL)).run_once()
    engine.dispose()
    deadline = time.monotonic() + 30
    while not httpx.get(f"{url}/status").json()["is_ready"]:
        if time.monotonic() > deadline:
            raise TimeoutError("model not served")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
