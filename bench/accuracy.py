"""Prediction accuracy through the real service: in range, and beyond the training range.

The data: `backend.sim.latency.sample_rows`, a generator shaped by measured GPU profiles
(vidur operator timings and aiconfigurator attention kernels, A100 / Llama-3-8B by default; see
`backend/sim/profiles/NOTICE.md`), with realistic prompt lengths (Azure traces), prefix hits
(Mooncake) and load from idle to saturated. Labels carry 3 % log-normal noise; errors are
measured against the noise-free latency.

For each model kind (our `hybrid` and upstream-style plain `xgboost`), one `headroom serve`
(embedded mode) is started with `HEADROOM_TRAINING__MODEL_KIND` set, samples are posted to
`/pools/{pool}/add_training_data_bulk` as the EPP sends them, the service trains on its own
schedule, and predictions come from `/pools/{pool}/predict/bulk/strict`:

* pool `full`: trained on all prompt lengths, tested on fresh rows of the same distribution;
* pool `short`: trained only on prompts <= 1,024 tokens, tested on 1,025-2,048 and > 2,048.

    .venv/bin/python bench/accuracy.py [--train 4000] [--test 2000] [--profile a100-llama3-8b]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from _common import headroom_process, machine

from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

KINDS = ("hybrid", "xgboost")


def scores(predicted: np.ndarray, true: np.ndarray) -> dict[str, float]:
    relative = (predicted - true) / true
    return {
        "mape": round(float(np.mean(np.abs(relative))), 4),
        "median_bias": round(float(np.median(relative)), 4),
        "p90_ape": round(float(np.percentile(np.abs(relative), 90)), 4),
        # The SLO-breaking failure: predicting far less latency than the request will see.
        "share_under_by_20pct": round(float(np.mean(relative < -0.2)), 4),
        "max_predicted_ms": round(float(predicted.max()), 1),
        "true_median_ms": round(float(np.median(true)), 1),
    }


def predict(url: str, pool: str, rows: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    requests = prediction_requests(rows)
    ttft, tpot = [], []
    for i in range(0, len(requests), 1000):
        r = httpx.post(
            f"{url}/pools/{pool}/predict/bulk/strict", json={"requests": requests[i : i + 1000]}
        )
        r.raise_for_status()
        for p in r.json()["predictions"]:
            ttft.append(p["ttft_ms"])
            tpot.append(p["tpot_ms"])
    return np.array(ttft), np.array(tpot)


def wait_trained(url: str, pool: str, after: str | None) -> None:
    deadline = time.monotonic() + 180
    while True:
        status = httpx.get(f"{url}/pools/{pool}/status").json()
        if status["models_exist"]["tpot_model"] and status["last_model_load"] != after:
            versions = httpx.get(f"{url}/v1/models", params={"pool": pool}).json()
            if versions and not _pending(url, pool, versions):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pool {pool} was not trained")
        time.sleep(0.5)


def _pending(url: str, pool: str, versions: list[dict[str, Any]]) -> bool:
    """True while the window holds samples newer than every stored model."""
    stats = httpx.get(f"{url}/v1/samples/stats", params={"pool": pool}).json()
    stored = {t: s["train"] + s["test"] for t, s in stats["targets"].items()}
    trained = {v["target"]: v["n_train"] + v["n_test"] for v in versions}
    return any(trained.get(t, 0) < n for t, n in stored.items())


def run_kind(kind: str, args: argparse.Namespace) -> dict[str, Any]:
    profile = load_profile(args.profile)
    rng = np.random.default_rng(args.seed)
    full_train = sample_rows(args.train, rng, profile)
    short_train = sample_rows(args.train, rng, profile, max_input_tokens=1024)
    tests = {
        "in_range": ("full", sample_rows(args.test, rng, profile)),
        "in_range_short": ("short", sample_rows(args.test, rng, profile, max_input_tokens=1024)),
        "1025_2048": (
            "short",
            sample_rows(args.test, rng, profile, min_input_tokens=1025, max_input_tokens=2048),
        ),
        "above_2048": (
            "short",
            sample_rows(args.test, rng, profile, min_input_tokens=2049, max_input_tokens=8192),
        ),
    }
    env = {
        "HEADROOM_TRAINING__MODEL_KIND": kind,
        "HEADROOM_TRAINING__INTERVAL_S": "1",
        "HEADROOM_LOG_LEVEL": "warning",
    }
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, headroom_process(env, Path(tmp)) as (url, _):
        for pool, data in (("full", full_train), ("short", short_train)):
            httpx.post(f"{url}/v1/pools", json={"name": pool}).raise_for_status()
            entries = training_entries(data)
            for i in range(0, len(entries), 5000):
                r = httpx.post(
                    f"{url}/pools/{pool}/add_training_data_bulk",
                    json={"entries": entries[i : i + 5000]},
                )
                assert r.status_code == 202
        for pool in ("full", "short"):
            wait_trained(url, pool, None)
        for name, (pool, rows) in tests.items():
            ttft, tpot = predict(url, pool, rows)
            out[name] = {
                "pool": pool,
                "ttft": scores(ttft, rows["ttft_true_ms"]),
                "tpot": scores(tpot, rows["tpot_true_ms"]),
            }
            # Idle pods: TTFT is the prompt's own prefill, where prompt length alone decides
            # (the mission's A100 replay measured this case); queueing dilutes it elsewhere.
            idle = (rows["num_request_running"] == 0) & (rows["num_request_waiting"] == 0)
            idle &= rows["prefill_tokens_in_flight"] == 0
            if idle.sum() >= 20:
                out[name]["ttft_idle_pods"] = {
                    "n": int(idle.sum()),
                    **scores(ttft[idle], rows["ttft_true_ms"][idle]),
                }
        out["training_max_prompt_short"] = int(short_train["input_token_length"].max())
        out["models"] = [
            {k: v[k] for k in ("pool", "target", "n_train", "n_test", "metrics")}
            for v in httpx.get(f"{url}/v1/models").json()
            if v["status"] == "active"
        ]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--train", type=int, default=4000, help="training rows per pool")
    parser.add_argument("--test", type=int, default=2000, help="test rows per range")
    parser.add_argument("--profile", default="a100-llama3-8b")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = {kind: run_kind(kind, args) for kind in KINDS}
    ours = results["hybrid"]
    checks = {
        "in_range_ttft_mape_le_3pct": ours["in_range"]["ttft"]["mape"] <= 0.03,
        "in_range_tpot_mape_le_1.5pct": ours["in_range"]["tpot"]["mape"] <= 0.015,
        "ttft_bias_1025_2048_within_5pct": abs(ours["1025_2048"]["ttft"]["median_bias"]) <= 0.05,
        "ttft_bias_above_2048_within_5pct": abs(ours["above_2048"]["ttft"]["median_bias"]) <= 0.05,
    }
    print(
        json.dumps(
            {
                "benchmark": "accuracy",
                "machine": machine(),
                "profile": args.profile,
                "train_rows_per_pool": args.train,
                "samples_posted_per_pool": 2 * args.train,
                "test_rows_per_range": args.test,
                "label_noise": 0.03,
                "results": results,
                "targets_met": checks,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
