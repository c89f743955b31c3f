"""Prediction latency: `POST /predict/bulk/strict` with 100 rows on loopback, one API worker.

Starts `headroom serve` (embedded mode, its own SQLite file), trains it on profile-shaped
samples through `/add_training_data_bulk`, waits until both models are served, then measures:
sequential calls (p50/p99 as the client sees them, over one keep-alive connection) and
throughput with 8 concurrent client processes. The clients share the machine's cores with the
server, so the figures include their cost. Also reports the server-side `processing_time_ms`
and the model's in-process predict time for the same 100 rows. Prints JSON.

    .venv/bin/python bench/predict.py [--calls 3000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
from _common import machine, trained_server

from backend.predictor.regressors import load_model
from backend.predictor.training import predict_columns, train_target
from backend.sim.entries import prediction_requests
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

ROWS = 100


def _connection(url: str) -> http.client.HTTPConnection:
    host, port = url.removeprefix("http://").split(":")
    return http.client.HTTPConnection(host, int(port))


def _call(conn: http.client.HTTPConnection, body: bytes) -> dict[str, Any]:
    conn.request("POST", "/predict/bulk/strict", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise RuntimeError(f"{response.status}: {data[:200]!r}")
    result: dict[str, Any] = orjson.loads(data)
    return result


def _client(url: str, body: bytes, seconds: float, out: Any) -> None:
    conn = _connection(url)
    calls = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _call(conn, body)
        calls += 1
    out.put(calls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000, help="sequential calls")
    parser.add_argument("--seconds", type=float, default=10.0, help="concurrent phase length")
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()

    profile = load_profile("a100-llama3-8b")
    query = sample_rows(ROWS, np.random.default_rng(1), profile)
    body = orjson.dumps({"requests": prediction_requests(query)})

    with tempfile.TemporaryDirectory() as tmp, trained_server(Path(tmp)) as url:
        conn = _connection(url)
        for _ in range(200):  # warm-up
            _call(conn, body)
        latencies = np.empty(args.calls)
        server_ms = np.empty(args.calls)
        for i in range(args.calls):
            start = time.perf_counter()
            result = _call(conn, body)
            latencies[i] = (time.perf_counter() - start) * 1000
            server_ms[i] = result["processing_time_ms"]
        conn.close()

        queue: Any = mp.get_context("spawn").Queue()
        procs = [
            mp.get_context("spawn").Process(target=_client, args=(url, body, args.seconds, queue))
            for _ in range(args.clients)
        ]
        for p in procs:
            p.start()
        total_calls = sum(queue.get() for _ in procs)
        for p in procs:
            p.join()

    # The same 100 rows through the models alone, in this process.
    in_process = _model_predict_ms(query)
    print(
        json.dumps(
            {
                "benchmark": "predict",
                "machine": machine(),
                "rows_per_call": ROWS,
                "api_workers": 1,
                "sequential_calls": args.calls,
                "latency_ms": {
                    "p50": round(float(np.percentile(latencies, 50)), 3),
                    "p90": round(float(np.percentile(latencies, 90)), 3),
                    "p99": round(float(np.percentile(latencies, 99)), 3),
                    "mean": round(float(latencies.mean()), 3),
                },
                "server_processing_ms_p50": round(float(np.percentile(server_ms, 50)), 3),
                "concurrent_clients": args.clients,
                "concurrent_calls_per_s": round(total_calls / args.seconds, 1),
                "concurrent_rows_per_s": round(total_calls * ROWS / args.seconds),
                "model_predict_ms_100_rows_both_targets": in_process,
                "targets": {"p50_ms": 2.0, "p99_ms": 5.0},
                "meets_targets": bool(
                    np.percentile(latencies, 50) <= 2.0 and np.percentile(latencies, 99) <= 5.0
                ),
            },
            indent=2,
        )
    )


def _model_predict_ms(query: dict[str, Any]) -> float:
    """Median in-process predict time (both targets) for the query rows, with models trained
    the same way on the same samples as the server's (artifacts round-tripped like serving)."""
    profile = load_profile("a100-llama3-8b")
    data = sample_rows(5000, np.random.default_rng(0), profile)
    targets: tuple[Literal["ttft", "tpot"], ...] = ("ttft", "tpot")
    models = {}
    for target in targets:
        labels = data[f"actual_{target}_ms"]
        result = train_target(target, data, labels, np.zeros(len(labels), dtype=bool))
        models[target] = load_model(result.model.to_artifact())
    times = []
    for _ in range(500):
        start = time.perf_counter()
        for target in targets:
            predict_columns(models[target], target, query)
        times.append((time.perf_counter() - start) * 1000)
    return round(float(np.median(times)), 4)


if __name__ == "__main__":
    main()
