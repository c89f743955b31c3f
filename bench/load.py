"""Sustained load on one API process: bulk-strict predictions mixed with ingestion.

One `headroom serve` (one uvicorn worker, production mode: PostgreSQL + Redis) is trained,
then driven open-loop for `--seconds`: `--rate` `POST /predict/bulk/strict` calls per second
of 100 rows each, spread over several client processes, plus `--ingest-rate` calls per second
of 1,000 entries to `POST /add_training_data_bulk` (from several client processes, as from
several EPP replicas). Latency is measured from each call's
scheduled send time (so a stalled server cannot hide behind a slowed client: no coordinated
omission). Prints JSON: achieved rates, errors, p50/p90/p99/max per kind.

    .venv/bin/python bench/load.py [--seconds 60] [--rate 500] [--ingest-rate 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
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
ENTRIES_PER_CALL = 1000


def _drive(
    url: str,
    path: str,
    bodies: list[bytes],
    rate: float,
    offset: float,
    seconds: float,
    ok_status: int,
    clock: Any,
    out: Any,
) -> None:
    # The load generator shares the machine with the server: at a lower priority it does not
    # preempt the server each time a response wakes it up. A client that runs late only makes
    # the latency it measures (from the scheduled send time) worse, never better.
    os.nice(10)
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    # Every client is up (imports done, connection made) before the clock starts: a client
    # still starting would otherwise count its own start-up as the server's latency.
    ready, go, start_at = clock
    ready.wait()
    go.wait()
    start = start_at.value + offset
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
    parser.add_argument(
        "--ingest-processes",
        type=int,
        default=1,
        help="the API process's ingestion helper processes (HEADROOM_INGEST__PROCESSES)",
    )
    parser.add_argument(
        "--ingest-clients",
        type=int,
        default=4,
        help="ingestion client processes (EPP replicas each post their own batches)",
    )
    args = parser.parse_args()

    profile = load_profile("a100-llama3-8b")
    rng = np.random.default_rng(0)
    predict_bodies = [
        orjson.dumps({"requests": prediction_requests(sample_rows(100, rng, profile))})
        for _ in range(20)
    ]
    # As the EPP sends them: each observed request is a TTFT entry and a TPOT entry, so 500
    # requests make the 1,000 entries of a call.
    ingest_entries = [training_entries(sample_rows(500, rng, profile)) for _ in range(10)]
    assert all(len(entries) == ENTRIES_PER_CALL for entries in ingest_entries)
    ingest_bodies = [orjson.dumps({"entries": entries}) for entries in ingest_entries]
    url_db = bench_database_url("headroom_bench_load")
    recreate_database(url_db)
    migrate.upgrade(url_db)
    env = {
        "HEADROOM_DATABASE_URL": url_db,
        "HEADROOM_REDIS_URL": REDIS_URL,
        "HEADROOM_LOG_LEVEL": "warning",
        "HEADROOM_INGEST__PROCESSES": str(args.ingest_processes),
    }
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp, headroom_process(env, Path(tmp)) as (url, _):
        _train(url, url_db, ingest_bodies[0])
        queue: Any = ctx.Queue()
        n_procs = args.clients + args.ingest_clients
        clock = (ctx.Barrier(n_procs + 1), ctx.Event(), ctx.Value("d", 0.0))

        def client(path: str, bodies: list[bytes], rate: float, offset: float, ok: int) -> Any:
            return ctx.Process(
                target=_drive,
                args=(url, path, bodies, rate, offset, args.seconds, ok, clock, queue),
            )

        procs = [
            client(
                "/predict/bulk/strict", predict_bodies, args.rate / args.clients, k / args.rate, 200
            )
            for k in range(args.clients)
        ] + [
            client(
                "/add_training_data_bulk",
                ingest_bodies,
                args.ingest_rate / args.ingest_clients,
                k / args.ingest_rate,
                202,
            )
            for k in range(args.ingest_clients)
        ]
        for p in procs:
            p.start()
        clock[0].wait()
        clock[2].value = time.perf_counter() + 0.2
        clock[1].set()
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
                "ingest_helper_processes": args.ingest_processes,
                "clients": {"predict": args.clients, "ingest": args.ingest_clients},
                "seconds": args.seconds,
                "predict_rows_per_call": 100,
                "ingest_entries_per_call": ENTRIES_PER_CALL,
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
