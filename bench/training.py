"""Training cost and model freshness, in production mode (PostgreSQL, Redis, Celery).

1. Full-window retrain: every bucket of a (pool, target) window at its cap (200 buckets x 500 =
   100,000 rows with the default settings), labels from the GPU-profile generator; times one
   `Trainer.train` call end to end (trim, read from PostgreSQL, fit, held-out evaluation, store),
   with the pure fit reported beside it.
2. Freshness: `headroom serve` + `headroom worker --beat` with the default 10 s interval; after
   the last sample of a batch is acknowledged, how long until `/status` reports a newly loaded
   model. Repeated a few times; the wait depends on where in the beat interval the batch lands.

    .venv/bin/python bench/training.py [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
from _common import bench_database_url, headroom_process, machine, recreate_database

from backend import migrate
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.predictor.window import WindowSpec
from backend.registry.locks import LocalLocks
from backend.registry.models import ModelVersion
from backend.registry.notify import LocalNotifier
from backend.registry.trainer import Trainer
from backend.samples.models import TargetCode
from backend.samples.repository import read_window
from backend.samples.schemas import TrainingEntry
from backend.samples.service import ingest
from backend.settings import Settings
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows, true_latency
from tests.server import headroom_worker

REDIS_URL = "redis://127.0.0.1:6379/14"


def full_window_rows(spec: WindowSpec, rng: np.random.Generator) -> dict[str, Any]:
    """Realistic rows, then re-drawn KV / prefix / queue so every bucket gets exactly `cap`."""
    profile = load_profile("a100-llama3-8b")
    n = spec.n_buckets * spec.cap
    rows = sample_rows(n, rng, profile)
    bucket = np.repeat(np.arange(spec.n_buckets), spec.cap)
    rest, p = np.divmod(bucket, spec.n_prefix)
    q, k = np.divmod(rest, spec.n_kv)
    rows["kv_cache_percentage"] = (k + rng.random(n) * 0.999) * spec.kv_step
    rows["prefix_cache_score"] = np.minimum((p + rng.random(n) * 0.999) * spec.prefix_step, 1.0)
    lows = np.array((0, *spec.queue_edges))
    highs = np.array((*spec.queue_edges, spec.queue_edges[-1] * 2))
    rows["num_request_waiting"] = rng.integers(lows[q], highs[q])
    ttft, tpot = true_latency(rows, profile)
    noise = np.exp(rng.normal(0, 0.03, (2, n)))
    rows["actual_ttft_ms"], rows["actual_tpot_ms"] = ttft * noise[0], tpot * noise[1]
    return rows


def full_window_retrain(url: str) -> dict[str, Any]:
    settings = Settings(database_url=url, redis_url=REDIS_URL)
    spec = WindowSpec.from_settings(settings.window)
    sessions = make_sessionmaker(make_engine(url))
    entries = training_entries(full_window_rows(spec, np.random.default_rng(3)), as_epp=False)
    for i in range(0, len(entries), 10_000):
        with unit_of_work(sessions) as session:
            batch = [TrainingEntry.model_validate(e) for e in entries[i : i + 10_000]]
            ingest(session, 1, batch, spec, settings.window.test_fraction, random.Random(i))
    out: dict[str, Any] = {"rows_per_target": len(entries), "buckets": spec.n_buckets}
    for target in TargetCode:
        trainer = Trainer(sessions, settings, LocalLocks(), LocalNotifier())
        start = time.perf_counter()
        with sessions() as session:
            read_window(session, 1, target)
        read_s = time.perf_counter() - start
        start = time.perf_counter()
        outcome = trainer.train(1, target)
        total_s = time.perf_counter() - start
        with sessions() as session:
            version = session.get(ModelVersion, outcome.version_id)
            assert version is not None
            out[target.label] = {
                "status": outcome.status,
                "end_to_end_s": round(total_s, 3),
                "read_window_s": round(read_s, 3),
                "fit_and_evaluate_s": round(version.train_seconds, 3),
                "n_train": version.n_train,
                "n_test": version.n_test,
                "held_out_mape": round(version.metrics["mape"], 4),
            }
    return out


def freshness(url: str, rounds: int) -> dict[str, Any]:
    redis.Redis.from_url(REDIS_URL).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": url,
        "HEADROOM_REDIS_URL": REDIS_URL,
        "HEADROOM_LOG_LEVEL": "warning",
    }
    waits = []
    profile = load_profile("a100-llama3-8b")
    with (
        tempfile.TemporaryDirectory() as tmp,
        headroom_process(env, Path(tmp)) as (api, _),
        headroom_worker(env, Path(tmp)),
    ):
        for r in range(rounds):
            before = httpx.get(f"{api}/status").json()["last_model_load"]
            rows = sample_rows(500, np.random.default_rng(100 + r), profile)
            body = {"entries": training_entries(rows)}
            assert httpx.post(f"{api}/add_training_data_bulk", json=body).status_code == 202
            acked = time.perf_counter()
            while httpx.get(f"{api}/status").json()["last_model_load"] == before:
                if time.perf_counter() - acked > 60:
                    raise TimeoutError("no new model within 60 s")
                time.sleep(0.05)
            waits.append(time.perf_counter() - acked)
            time.sleep(1.7 * (r + 1) % 10)  # land the next batch elsewhere in the interval
    return {
        "interval_s": Settings().training.interval_s,
        "rounds": rounds,
        "seconds_from_last_sample_to_served": [round(w, 2) for w in waits],
        "max_s": round(max(waits), 2),
        "target_max_s": 12.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    url = bench_database_url("headroom_bench_training")
    recreate_database(url)
    migrate.upgrade(url)
    retrain = full_window_retrain(url)
    fresh_url = bench_database_url("headroom_bench_freshness")
    recreate_database(fresh_url)
    migrate.upgrade(fresh_url)
    print(
        json.dumps(
            {
                "benchmark": "training",
                "machine": machine(),
                "full_window_retrain": retrain,
                "target_full_window_s": 3.0,
                "freshness": freshness(fresh_url, args.rounds),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
