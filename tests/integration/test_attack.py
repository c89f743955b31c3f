"""A flood cannot take the model; a genuine change of regime still can (production mode).

PostgreSQL, Redis, a real Celery worker with beat and a `headroom serve` process with tokens
required and the upstream routes trusted, as the black-box attack of issue 15 found them. The
flood replays that attack: twelve anonymous batches of 10,000 entries spread over every bucket,
within about two seconds, each 80 times slower than the pods really are.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis

from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.conftest import redis_url_for_tests
from tests.server import headroom_process, headroom_worker

PROFILE = load_profile("a100-llama3-8b")
PROBE = {"requests": prediction_requests(sample_rows(20, np.random.default_rng(4242), PROFILE))}


@contextmanager
def _production(
    database_url: str, tmp_path: Path, **env: str
) -> Iterator[tuple[str, httpx.Client]]:
    """An API process and a worker with beat, tokens required, training every second."""
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_AUTH__REQUIRED": "true",
        "HEADROOM_TRAINING__INTERVAL_S": "1",
        **env,
    }
    with (
        headroom_process(env, tmp_path) as (api, _),
        headroom_worker(env, tmp_path),
        httpx.Client(timeout=60) as client,
    ):
        yield api, client


def _honest(seed: int, n: int, scale: float = 1.0) -> list[dict[str, Any]]:
    """What the EPP posts for `n` requests served by 40 pods (latency times `scale`)."""
    rows = sample_rows(n, np.random.default_rng(seed), PROFILE)
    rows["actual_ttft_ms"] = rows["actual_ttft_ms"] * scale
    rows["actual_tpot_ms"] = rows["actual_tpot_ms"] * scale
    entries = training_entries(rows)
    for i, e in enumerate(entries):
        e["pod"] = f"vllm-{(i // 2) % 40}"
    return entries


def _post(client: httpx.Client, url: str, entries: list[dict[str, Any]]) -> int:
    return client.post(f"{url}/add_training_data_bulk", json={"entries": entries}).status_code


def _post_alone(url: str, entries: list[dict[str, Any]]) -> int:
    """One anonymous client per batch, as the attack had."""
    with httpx.Client(timeout=60) as client:
        return _post(client, url, entries)


def _probe(url: str) -> float:
    """Mean predicted TTFT of 20 honest probe rows, from the served model."""
    r = httpx.post(f"{url}/predict/bulk/strict", json=PROBE, timeout=10)
    assert r.status_code == 200, r.text
    return float(np.mean([p["ttft_ms"] for p in r.json()["predictions"]]))


def _warm_up(client: httpx.Client, url: str) -> float:
    """Honest traffic until the model is trained on it and stable; the probe's value then."""
    for seed in range(8):
        assert _post(client, url, _honest(seed, 1500)) == 202
        time.sleep(0.5)
    deadline = time.monotonic() + 60
    while not httpx.get(f"{url}/status").json()["models_exist"]["ttft_model"]:
        assert time.monotonic() < deadline, "no model was trained"
        time.sleep(0.2)
    time.sleep(4)  # a few more rounds on the whole honest window
    return _probe(url)


def _flood_batch(k: int) -> list[dict[str, Any]]:
    """10,000 entries, 50 in each of the 200 default buckets (10 KV x 4 prefix x 5 queue)."""
    rng = np.random.default_rng(1000 + k)
    out = []
    for kv in range(10):
        for prefix in range(4):
            for waiting in (0, 1, 3, 8, 16):
                for _ in range(50):
                    out.append(
                        {
                            "kv_cache_percentage": kv / 10 + 0.05,
                            "prefix_cache_score": prefix / 4 + 0.1,
                            "num_request_waiting": waiting,
                            "input_token_length": int(rng.integers(50, 4000)),
                            "num_request_running": int(rng.integers(0, 60)),
                            "num_tokens_generated": int(rng.integers(1, 500)),
                            "actual_ttft_ms": 5000.0,
                            "actual_tpot_ms": 500.0,
                        }
                    )
    return out


def test_a_flood_of_poisoned_samples_does_not_move_the_model(
    database_url: str, tmp_path: Path
) -> None:
    flood = [_flood_batch(k) for k in range(12)]
    # The per-address rate limit off: the flood rule must hold on its own, with all of the
    # flood stored (the limit is tested in test_ingest_limits.py).
    with _production(
        database_url,
        tmp_path,
        HEADROOM_TRAINING__SHIFT_HOLD_S="120",
        HEADROOM_INGEST__CLIENT_BYTES_PER_S="0",
    ) as (api, client):
        before = _warm_up(client, api)
        started = time.monotonic()
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(lambda b: _post_alone(api, b), flood))
        # How long the server took to take it all in: a few seconds, longer on a loaded
        # machine. Training rounds (every second here) run during the flood and after it.
        burst_s = time.monotonic() - started
        assert answers == [202] * 12  # all of it stored: it pushes honest rows out
        # The EPP goes on posting honest samples; the model must stay put for over a minute.
        worst = 0.0
        seed = 100
        until = time.monotonic() + 65
        while time.monotonic() < until:
            _post(client, api, _honest(seed, 300))
            seed += 1
            worst = max(worst, abs(_probe(api) / before - 1))
            time.sleep(1)
        print(f"flood of {burst_s:.1f} s; worst probe change after it {worst:.1%}")
        assert worst < 0.10, (worst, before, answers)


def test_a_sustained_change_of_regime_is_followed_once_it_has_held(
    database_url: str, tmp_path: Path
) -> None:
    hold_s = 12.0
    with _production(database_url, tmp_path, HEADROOM_TRAINING__SHIFT_HOLD_S=str(hold_s)) as (
        api,
        client,
    ):
        before = _warm_up(client, api)
        # Every pod five times slower, second after second (say a bad driver rolled out).
        switched = time.monotonic()
        ratios: list[tuple[float, float]] = []
        seed = 200
        while time.monotonic() - switched < hold_s + 20:
            assert _post(client, api, _honest(seed, 400, scale=5.0)) == 202
            seed += 1
            ratios.append((time.monotonic() - switched, _probe(api) / before))
            if ratios[-1][1] > 4.0:
                break
            time.sleep(1)
    held = [r for t, r in ratios if t < hold_s * 0.75]
    assert held and max(held) < 1.5, ratios  # not before the shift has held
    # Followed within the documented delay: the hold, plus a few training rounds.
    assert ratios[-1][1] > 4.0, ratios
