"""Scheduling core: latency of ``schedule()`` for 100 candidates. Prints JSON.

    .venv/bin/python bench/schedule_core.py [--quick]

The predictor is a fake that returns precomputed arrays, so the figures are the scheduling
library alone (features, headroom, filters, scorer, picker, per-candidate trace), not the model.
Wall-clock figures depend on the machine, which the output states; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling import (
    Candidate,
    SchedulingPolicy,
    SchedulingRequest,
    Topology,
    schedule,
)


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def pool(n: int, *, pd: bool, rng: random.Random) -> list[Candidate]:
    pods = []
    for i in range(n):
        role = ("prefill" if i % 2 else "decode") if pd else ""
        pods.append(
            Candidate(
                name=f"pod-{i:03d}",
                kv_cache_percentage=rng.random(),
                input_token_length=2048,
                num_request_waiting=rng.randrange(8),
                num_request_running=rng.randrange(1, 32),
                prefix_cache_score=rng.choice([0.0, 0.5, 0.85, 1.0]),
                role=role,  # type: ignore[arg-type]
                topology=Topology(
                    host=f"h{i // 2}", rack=f"r{i // 8}", zone=f"z{i // 32}", region="us"
                ),
                running_tpot_slos_ms=(40.0,) if i % 5 == 0 else (),
            )
        )
    return pods


def fake_predictor(n: int, rng: random.Random) -> Any:
    ttft = np.array([rng.uniform(50, 900) for _ in range(n)])
    tpot = np.array([rng.uniform(10, 60) for _ in range(n)])

    def predict(
        candidates: Sequence[Candidate], request: SchedulingRequest
    ) -> tuple[np.ndarray, np.ndarray]:
        return ttft, tpot

    return predict


def failing_predictor(candidates: Sequence[Candidate], request: SchedulingRequest) -> Any:
    raise RuntimeError("predictor down")


def measure(
    policy: SchedulingPolicy, candidates: list[Candidate], predictor: Any, calls: int
) -> dict[str, float]:
    request = SchedulingRequest(prompt_tokens=2048, ttft_slo_ms=500, tpot_slo_ms=40, seed=None)
    for _ in range(min(calls, 200)):
        schedule(request, candidates, policy, predictor)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        schedule(request, candidates, policy, predictor)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {
        "p50_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[int(0.99 * (len(times) - 1))], 3),
        "calls": calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    calls = 300 if args.quick else 3000
    rng = random.Random(7)
    n = 100
    flat, pd = pool(n, pd=False, rng=rng), pool(n, pd=True, rng=rng)
    predictor = fake_predictor(n, rng)
    cases = {
        "slo_weighted_random": (SchedulingPolicy(), flat, predictor),
        "slo_best_fit": (SchedulingPolicy(picker="best_fit"), flat, predictor),
        "routing_weighted_random": (SchedulingPolicy(mode="routing"), flat, predictor),
        "predictor_down_fallback": (SchedulingPolicy(), flat, failing_predictor),
        "pd_greedy_50x50": (SchedulingPolicy(), pd, predictor),
        "pd_joint_50x50": (SchedulingPolicy(pd_selection="joint"), pd, predictor),
    }
    print(
        json.dumps(
            {
                "benchmark": "schedule_core",
                "candidates": n,
                "machine": machine(),
                "results": {k: measure(p, c, f, calls) for k, (p, c, f) in cases.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
