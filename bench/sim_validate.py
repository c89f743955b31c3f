"""Check the simulated pod against measured whole-model vLLM latencies. Prints JSON.

    .venv/bin/python bench/sim_validate.py [DATA_DIR]   (default ../shared/data)

LLM-Inference-Bench (argonne-lcf, ``Plots/All_results.csv``) timed vLLM serving a static batch
of B requests, each with L prompt and L output tokens, on one A100 or H100, for Llama-2-7B and
Llama-3-8B. The same batch is replayed here through ``backend.sim.server.Server`` (chunked
prefill within the token budget, continuous batching, KV admission control and preemption, step
costs from the shipped profiles) and the time until the last request finishes is compared with
the measured batch latency. The data folder is read only by this script; nothing ships from it.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.sim.gpu import load_profile
from backend.sim.server import Outcome, Request, Seq, Server

CASES = {
    ("Nvidia A100 GPU", "meta-llama/Llama-2-7b-hf"): "a100-llama2-7b",
    ("Nvidia H100 GPU", "meta-llama/Llama-2-7b-hf"): "h100-llama2-7b",
    ("Nvidia A100 GPU", "meta-llama/Meta-Llama-3-8B"): "a100-llama3-8b",
}


def simulate_batch(profile_name: str, length: int, batch: int) -> tuple[float, int]:
    """Seconds until a static batch of ``batch`` requests (``length`` in, ``length`` out) is
    done on one simulated pod, and the preemptions it took."""
    server = Server(0, "pod", load_profile(profile_name), max_context=2 * length + 64)
    units = -(-length // 512)
    t: float | None = None
    for i in range(batch):
        ids = [i * 1000 + u for u in range(units)]  # no prefix shared: the benchmark's prompts
        t = server.enqueue(Seq(Request(i, 0.0, length, length, ids, 0)), 0.0) or t
    out: list[Outcome] = []
    last = 0.0
    while t is not None:
        last = t
        t = server.advance(t, out)
    return last, server.preemptions


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "shared" / "data"
    path = data / "llm-inference-bench" / "All_results.csv"
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    points: list[dict[str, Any]] = []
    for r in rows:
        key = (r["Hardware"], r["Model"])
        if r["Framework"] != "vLLM" or r["Num of Hardware"] != "1" or key not in CASES:
            continue
        length, batch = int(r["Input Output Length"]), int(r["Batch Size"])
        measured = float(r["Latency"])
        simulated, preemptions = simulate_batch(CASES[key], length, batch)
        points.append(
            {
                "profile": CASES[key],
                "length": length,
                "batch": batch,
                "measured_s": round(measured, 3),
                "simulated_s": round(simulated, 3),
                "error_pct": round(100.0 * (simulated - measured) / measured, 1),
                "preemptions": preemptions,
            }
        )
    by_profile: dict[str, dict[str, float]] = {}
    for name in sorted({p["profile"] for p in points}):
        errors = [abs(p["error_pct"]) for p in points if p["profile"] == name]
        by_profile[name] = {
            "points": len(errors),
            "mape_pct": round(statistics.fmean(errors), 1),
            "median_ape_pct": round(statistics.median(errors), 1),
            "max_ape_pct": round(max(errors), 1),
        }
    print(
        json.dumps(
            {
                "benchmark": "simulator vs measured vLLM static-batch latency",
                "source": "argonne-lcf/LLM-Inference-Bench 4211f5d4 Plots/All_results.csv",
                "summary": by_profile,
                "points": points,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
