"""`POST /v1/schedule` latency with 100 candidate pods, over loopback, one API worker.

The server is trained first (profile-shaped samples, as in bench/predict.py), so decisions use
predictions, not the fallback. Each call carries 100 candidates with varied load, a TTFT and a
TPOT SLO, and runs the SLO-aware chain of the pool's policy; measured sequentially over one
keep-alive connection, for the default (weighted-random) and the best-fit picker. Prints JSON.

    .venv/bin/python bench/schedule.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _common import machine, trained_server

from backend.sim.entries import prediction_requests
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

CANDIDATES = 100


def body(seed: int) -> bytes:
    rows = sample_rows(CANDIDATES, np.random.default_rng(seed), load_profile("a100-llama3-8b"))
    pods = [{**r, "name": f"pod-{i}"} for i, r in enumerate(prediction_requests(rows))]
    request = {"prompt_tokens": 1500, "ttft_slo_ms": 400.0, "tpot_slo_ms": 40.0, "seed": seed}
    return orjson.dumps({"request": request, "candidates": pods})


def measure(url: str, payload: bytes, calls: int) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port))
    headers = {"Content-Type": "application/json"}
    times = np.empty(calls)
    fallback = 0
    for i in range(-100, calls):  # the first 100 warm up
        start = time.perf_counter()
        conn.request("POST", "/v1/schedule", payload, headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"{response.status}: {data[:300]!r}")
        if i >= 0:
            times[i] = (time.perf_counter() - start) * 1000
            fallback += bool(orjson.loads(data)["decision"]["fallback"])
    conn.close()
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 3),
        "p90_ms": round(float(np.percentile(times, 90)), 3),
        "p99_ms": round(float(np.percentile(times, 99)), 3),
        "fallback_decisions": fallback,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    payload = body(3)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, trained_server(Path(tmp)) as url:
        policy = httpx.get(f"{url}/v1/policies").json()[0]["id"]
        results["weighted_random"] = measure(url, payload, args.calls)
        httpx.put(f"{url}/v1/policies/{policy}", json={"picker": "best_fit"})
        time.sleep(2.5)  # the per-pool policy cache's lifetime
        results["best_fit"] = measure(url, payload, args.calls)
    print(
        json.dumps(
            {
                "benchmark": "schedule",
                "machine": machine(),
                "candidates_per_call": CANDIDATES,
                "api_workers": 1,
                "calls": args.calls,
                "latency": results,
                "target_p50_ms": 3.0,
                "meets_target": all(r["p50_ms"] <= 3.0 for r in results.values()),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
