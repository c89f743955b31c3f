"""Saturation's cost: `GET /v1/pools/{pool}/saturation` with 100 pods, and one tick's compute.

Starts `headroom serve` (embedded mode, its own SQLite file), posts profile-shaped samples
from 100 named pods as the EPP would, sets SLOs, waits for both models and the first
saturation report, then measures sequential GETs over one keep-alive connection (the answer
comes from memory) and, in this process, what one tick of one pool costs: predicting 32
representative requests on 100 pods and running the pool's chain for each, with the pods as
they stand and for the next interval (the service's window of arrivals at `--rate` per second
replayed onto them with the window's measured latency, `backend.scheduling.saturation.project`; and
without it, for its cost), and the service's default, their mix (both computed). The server
part runs three times: the default (the mix, computed in the API process's helper process),
the mix in a thread of the API process, and the present level alone in that thread; each also
times 100-row `/predict/bulk/strict` calls while the ticks run. Prints JSON.

    .venv/bin/python bench/saturation.py [--calls 2000] [--pods 100] [--rate 50] [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
from _common import machine

from backend.capacity.service import columns
from backend.capacity.signals import MAX_ARRIVALS_KEPT
from backend.predictor.training import predict_columns, train_target
from backend.scheduling.record import LevelRecord, Outcomes, corrected
from backend.scheduling.saturation import (
    Arrivals,
    Representative,
    Served,
    saturation,
    saturation_replicas,
    scaled,
)
from backend.scheduling.types import Candidate, FloatArray, SchedulingPolicy
from backend.settings import CapacitySettings
from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.server import headroom_process

PROFILE = load_profile("a100-llama3-8b")


def _percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {q: round(float(np.percentile(a, p)), 3) for q, p in (("p50", 50), ("p99", 99))} | {
        "max": round(float(a.max()), 3)
    }


def _http(url: str, pods: int, calls: int, seconds: float) -> dict[str, Any]:
    rows = sample_rows(5000, np.random.default_rng(0), PROFILE)
    entries = training_entries(rows)
    for i, e in enumerate(entries):
        e["pod"] = f"pod-{(i // 2) % pods:03d}"
    for i in range(0, len(entries), 5000):
        httpx.post(f"{url}/add_training_data_bulk", json={"entries": entries[i : i + 5000]})
    httpx.put(
        f"{url}/v1/policies/1", json={"default_ttft_slo_ms": 1000, "default_tpot_slo_ms": 50}
    ).raise_for_status()
    deadline = time.monotonic() + 120
    while True:
        body = httpx.get(f"{url}/v1/pools/default/saturation").json()
        if body["status"] == "ok" and body["fresh_pods"] == pods:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"no saturation report: {body['status']}")
        time.sleep(0.5)
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        conn.request("GET", "/v1/pools/default/saturation")
        response = conn.getresponse()
        response.read()
        times.append((time.perf_counter() - start) * 1000)
        assert response.status == 200
    get = {"pods": body["fresh_pods"], "saturation": body["saturation"], **_percentiles(times)}
    # The hot path while the ticks run: 100-row strict predictions, back to back on one
    # connection, for ``seconds`` (several ticks). A tick in a thread of the API process costs
    # /predict the time it holds the interpreter; in the helper, the cores it shares.
    probe = orjson.dumps(
        {"requests": prediction_requests(sample_rows(100, np.random.default_rng(1), PROFILE))}
    )
    headers = {"Content-Type": "application/json"}
    predict = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        start = time.perf_counter()
        conn.request("POST", "/predict/bulk/strict", body=probe, headers=headers)
        response = conn.getresponse()
        response.read()
        predict.append((time.perf_counter() - start) * 1000)
        assert response.status == 200
    end = httpx.get(f"{url}/v1/pools/default/saturation").json()
    return {
        "get_saturation_ms": get,
        "predict_bulk_100_ms": {"calls": len(predict), **_percentiles(predict)},
        # "ok" and non-null: the last tick computed, and replayed the arrivals (the mix).
        "status_at_end": end["status"],
        "next_interval_saturation_at_start": body["next_interval_saturation"],
        "next_interval_saturation_at_end": end["next_interval_saturation"],
    }


def _tick(pods: int, repeats: int, rate: float) -> dict[str, Any]:
    rows = sample_rows(5000, np.random.default_rng(0), PROFILE)
    held_out = np.zeros(len(rows["actual_ttft_ms"]), dtype=bool)
    ttft = train_target("ttft", rows, rows["actual_ttft_ms"], held_out).model
    tpot = train_target("tpot", rows, rows["actual_tpot_ms"], held_out).model
    rng = np.random.default_rng(1)
    candidates = [
        Candidate(
            name=f"pod-{i:03d}",
            kv_cache_percentage=float(rng.uniform(0, 1)),
            input_token_length=0,
            num_request_waiting=int(rng.integers(0, 8)),
            num_request_running=int(rng.integers(0, 64)),
            prefix_cache_score=0.0,
            prefill_tokens_in_flight=int(rng.integers(0, 8000)),
        )
        for i in range(pods)
    ]
    reps = [
        Representative(int(p), float(s))
        for p, s in zip(rng.integers(100, 8000, 32), rng.uniform(0, 1, 32), strict=True)
    ]

    def predict(batch: Any) -> tuple[FloatArray, FloatArray]:
        cols = columns(batch)
        return predict_columns(ttft, "ttft", cols), predict_columns(tpot, "tpot", cols)

    # The service's window of Poisson arrivals at `rate` (beyond 1,024 the replay merges runs
    # of them, so past about 17/s for 60 s the cost no longer grows with the window).
    window = CapacitySettings().arrival_window_s
    gaps = rng.exponential(1.0 / rate, int(rate * window * 1.5)) if rate > 0 else np.zeros(0)
    times_s = np.cumsum(gaps)
    kept = times_s[times_s < window]
    # What the window's samples measured (one TTFT and one TPOT sample per arrival, on pods
    # holding what these do), to which the replay scales its latency tables.
    held = rng.integers(0, 72, (2, len(kept))).astype(float)
    served = Served(
        tuple(zip(held[0].tolist(), rng.uniform(0.05, 2.0, len(kept)).tolist(), strict=True)),
        tuple(zip(held[1].tolist(), rng.uniform(0.01, 0.1, len(kept)).tolist(), strict=True)),
    )
    arrivals = Arrivals(tuple(kept.tolist()), window, 200.0, served=served)
    weight = CapacitySettings().present_weight  # the service's mix
    present: list[float] = []
    next_interval: list[float] = []
    next_unserved: list[float] = []
    mixed: list[float] = []
    counted: list[float] = []
    level_now = saturation(candidates, reps, SchedulingPolicy(), 1000.0, 50.0, predict).level

    def level_at(factor: float) -> float:
        if factor == 1.0:
            return level_now  # the tick's present level, already computed
        rows = [scaled(c, factor) for c in candidates]
        return saturation(rows, reps, SchedulingPolicy(), 1000.0, 50.0, predict).level

    for _ in range(repeats):
        # The saturation count's extra work on a tick: the idle and one-pod-fewer levels.
        start = time.perf_counter()
        saturation_replicas(level_at, len(candidates), len(candidates), 0.05)
        counted.append((time.perf_counter() - start) * 1000)
        for out, replayed, w in (
            (present, None, 1.0),
            (next_interval, arrivals, 0.0),
            (next_unserved, dataclasses.replace(arrivals, served=None), 0.0),
            (mixed, arrivals, weight),
        ):
            start = time.perf_counter()
            saturation(
                candidates, reps, SchedulingPolicy(), 1000.0, 50.0, predict, None, replayed, w
            )
            out.append((time.perf_counter() - start) * 1000)
    # The record's correction on a tick (backend.scheduling.record): its bias over the most
    # samples a pool keeps (16,384 a target) against 60 ticks, and the tick kept.
    record = LevelRecord()
    level = saturation(candidates, reps, SchedulingPolicy(), 1000.0, 50.0, predict)
    for t in range(60):
        record.add(float(t * 5), level)
    kept = MAX_ARRIVALS_KEPT
    outcomes = Outcomes(
        rng.uniform(0.0, 300.0, kept),
        np.ones(kept),
        rng.uniform(50.0, 2000.0, kept),
        rng.uniform(0.0, 300.0, kept),
        rng.uniform(5.0, 100.0, kept),
    )
    recorded: list[float] = []
    for k in range(repeats):
        start = time.perf_counter()
        bias = record.bias(330.0 + k, outcomes, 1000.0, 50.0)
        record.add(330.0 + k, corrected(level, bias))
        recorded.append((time.perf_counter() - start) * 1000)
    return {
        "pods": pods,
        "representatives": len(reps),
        "record_correction_extra": {"samples_per_target": kept, **_percentiles(recorded)},
        "present": _percentiles(present),
        "next_interval": {"arrivals": len(arrivals.times_s), **_percentiles(next_interval)},
        "next_interval_unserved": _percentiles(next_unserved),
        "mix_default": {"present_weight": weight, **_percentiles(mixed)},
        "saturation_replicas_extra": _percentiles(counted),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--ticks", type=int, default=20)
    parser.add_argument("--rate", type=float, default=50.0, help="arrivals/s replayed")
    parser.add_argument(
        "--rounds", type=int, default=2, help="of the three servers, interleaved (0: the tick only)"
    )
    parser.add_argument(
        "--predict-seconds", type=float, default=20.0, help="of /predict/bulk/strict calls"
    )
    args = parser.parse_args()
    # The service's default (the mix, the replay on every tick, computed in the helper
    # process) against the same mix computed in a thread of the API process and the present
    # level alone in that thread (the two earlier defaults), each in a server of its own.
    servers: tuple[tuple[str, dict[str, str]], ...] = (
        ("mix_default", {"HEADROOM_CAPACITY__HELPER_PROCESS": "true"}),  # explicit, as the rest
        ("mix_in_thread", {"HEADROOM_CAPACITY__HELPER_PROCESS": "false"}),
        (
            "present_only_in_thread",
            {
                "HEADROOM_CAPACITY__HELPER_PROCESS": "false",
                "HEADROOM_CAPACITY__PRESENT_WEIGHT": "1",
            },
        ),
    )
    # Rounds interleave the servers, so that the machine's drift over the run (a shared box)
    # falls on each of them alike. The samples' pods stay fresh and their arrivals in the
    # replay window for the whole measurement: with the defaults (30 s, a minute) the pods go
    # stale and the ticks stop computing halfway through it.
    served: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in servers}
    for _ in range(args.rounds):
        for name, extra in servers:
            with tempfile.TemporaryDirectory() as tmp:
                env = {
                    "HEADROOM_LOG_LEVEL": "warning",
                    "HEADROOM_TRAINING__INTERVAL_S": "1",
                    "HEADROOM_CAPACITY__ARRIVAL_WINDOW_S": "600",
                    "HEADROOM_CAPACITY__STALE_AFTER_S": "600",
                    **extra,
                }
                with headroom_process(env, Path(tmp)) as (url, _):
                    served[name].append(_http(url, args.pods, args.calls, args.predict_seconds))
    result = {
        "benchmark": "saturation",
        "machine": machine(),
        "served": served,
        "tick_ms_one_pool": _tick(args.pods, args.ticks, args.rate),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
