"""Check the simulated pod against measured whole-model vLLM latencies. Prints JSON.

    .venv/bin/python bench/sim_validate.py [DATA_DIR]   (default ../shared/data)

LLM-Inference-Bench (argonne-lcf, ``Plots/All_results.csv``) timed vLLM serving a static batch
of B requests, each with L prompt and L output tokens, on one A100 or H100, for Llama-2-7B and
Llama-3-8B. The same batch is replayed here through ``backend.sim.server.Server`` (vLLM V1's
scheduler: chunked prefill within the token budget, chunk-wise KV allocation, preemption by
recompute; step costs from the shipped profiles, no noise) and the time until the last request
finishes is compared with the measured batch latency.

The profiles' per-iteration framework overhead (``a + b x sequences``) was fitted by
``bench/tools/derive_profiles.py`` to the rows whose whole batch (B x 2L tokens) fits 16k tokens,
so scoring every row mixes fitted and unseen points. Three views keep them apart:

* ``shipped``: the profile as shipped, error on its fitted rows and on the rest (held out:
  every large batch);
* ``held_out``: the overhead refitted here on the small rows only and scored on the large ones
  (the same split, redone so that nothing else of the profile's derivation leaks in);
* ``leave_one_out``: each row scored by an overhead fitted on all the other rows.

All static-batch requests arrive at once, so the schedule (which requests run in which
iteration) does not depend on step durations: one replay with the overhead set to zero gives the
kernel time, the iteration count I and the sequence-iterations S of a row, and any overhead
``(a, b)`` then costs exactly ``a x I + b x S`` more. The data folder is read only by this
script; nothing ships from it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.sim.gpu import GpuProfile, load_profile
from backend.sim.server import Outcome, Request, Seq, Server

CASES = {
    ("Nvidia A100 GPU", "meta-llama/Llama-2-7b-hf"): "a100-llama2-7b",
    ("Nvidia H100 GPU", "meta-llama/Llama-2-7b-hf"): "h100-llama2-7b",
    ("Nvidia A100 GPU", "meta-llama/Meta-Llama-3-8B"): "a100-llama3-8b",
}
FIT_TOKENS = 16_384  # derive_profiles.py fits the overhead on rows with B x 2L <= this


class Replay(NamedTuple):
    kernel_ms: float  # time to the last finish with no framework overhead
    iterations: int
    seq_iterations: int  # sequences scheduled, summed over iterations
    preemptions: int
    mixed_ms: float  # kernel time in iterations that prefill and decode together


def replay_batch(profile: GpuProfile, length: int, batch: int) -> Replay:
    """A static batch of ``batch`` requests (``length`` in, ``length`` out) on one pod whose
    profile has no framework overhead."""
    bare = dataclasses.replace(profile, overhead_ms=0.0, overhead_per_seq_ms=0.0)
    server = Server(0, "pod", bare, max_context=2 * length + 64)
    units = -(-length // 512)
    t: float | None = None
    for i in range(batch):
        ids = [i * 1000 + u for u in range(units)]  # no prefix shared: the benchmark's prompts
        t = server.enqueue(Seq(Request(i, 0.0, length, length, ids, 0)), 0.0) or t
    out: list[Outcome] = []
    last = 0.0
    seq_iterations = 0
    mixed = 0.0
    while t is not None:
        # The run ending at t: its iterations and the sequences each one scheduled.
        seq_iterations += server._steps * (len(server._decoders) + len(server._chunks))
        if server._decoders and server._chunks:
            mixed += t - last
        last = t
        t = server.advance(t, out)
    return Replay(
        last * 1000.0, server.iterations, seq_iterations, server.preemptions, mixed * 1000.0
    )


def with_overhead(r: Replay, a: float, b: float) -> float:
    return r.kernel_ms + a * r.iterations + b * r.seq_iterations


def fit_overhead(points: list[tuple[Replay, float]]) -> tuple[float, float]:
    """``(a, b)`` minimising the relative error, as derive_profiles.py fits it: weighted least
    squares of (measured - kernel) on (I, S); a per-sequence cost is not negative."""
    measured = np.array([m for _, m in points])
    gap = measured - np.array([r.kernel_ms for r, _ in points])
    design = np.array([[r.iterations, r.seq_iterations] for r, _ in points], dtype=np.float64)
    w = 1.0 / measured
    (a, b), *_ = np.linalg.lstsq(design * w[:, None], gap * w, rcond=None)
    if b < 0:
        b = 0.0
        a = float(np.sum(gap * w * design[:, 0] * w) / np.sum((design[:, 0] * w) ** 2))
    return max(float(a), 0.0), float(b)


def errors(pairs: list[tuple[Replay, float]], a: float, b: float, keep: list[bool]) -> list[float]:
    """Signed % error of the rows kept, with overhead ``(a, b)``."""
    return [
        100.0 * (with_overhead(r, a, b) - m) / m for (r, m), k in zip(pairs, keep, strict=True) if k
    ]


def stats(errs: list[float]) -> dict[str, float]:
    if not errs:
        return {"points": 0}
    ape = [abs(e) for e in errs]
    return {
        "points": len(errs),
        "mape_pct": round(statistics.fmean(ape), 1),
        "median_ape_pct": round(statistics.median(ape), 1),
        "worst_pct": round(errs[int(np.argmax(ape))], 1),
    }


def main(argv: list[str]) -> int:
    data = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "shared" / "data"
    path = data / "llm-inference-bench" / "All_results.csv"
    with path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    by_profile: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["Hardware"], r["Model"])
        if r["Framework"] != "vLLM" or r["Num of Hardware"] != "1" or key not in CASES:
            continue
        length, batch = int(r["Input Output Length"]), int(r["Batch Size"])
        name = CASES[key]
        by_profile.setdefault(name, []).append(
            {
                "profile": name,
                "length": length,
                "batch": batch,
                "fitted": batch * 2 * length <= FIT_TOKENS,
                "measured_s": float(r["Latency"]),
                "replay": replay_batch(load_profile(name), length, batch),
            }
        )
    summary: dict[str, Any] = {}
    points: list[dict[str, Any]] = []
    for name in sorted(by_profile):
        pts = by_profile[name]
        profile = load_profile(name)
        measured = [p["measured_s"] * 1000.0 for p in pts]
        pairs = [(p["replay"], m) for p, m in zip(pts, measured, strict=True)]

        fitted = [p["fitted"] for p in pts]
        large = [not f for f in fitted]
        shipped = (profile.overhead_ms, profile.overhead_per_seq_ms)
        small_fit = fit_overhead([pr for pr, f in zip(pairs, fitted, strict=True) if f])
        loo = []
        for i, (r, m) in enumerate(pairs):
            a, b = fit_overhead(pairs[:i] + pairs[i + 1 :])
            loo.append(100.0 * (with_overhead(r, a, b) - m) / m)
        summary[name] = {
            "shipped": {
                "overhead_ms": shipped[0],
                "overhead_per_seq_ms": shipped[1],
                "all_rows": stats(errors(pairs, *shipped, [True] * len(pts))),
                "fitted_rows": stats(errors(pairs, *shipped, fitted)),
                "held_out_rows": stats(errors(pairs, *shipped, large)),
            },
            "held_out": {
                "fit_on": f"B x 2L <= {FIT_TOKENS} tokens",
                "overhead_ms": round(small_fit[0], 4),
                "overhead_per_seq_ms": round(small_fit[1], 5),
                "fit_rows": stats(errors(pairs, *small_fit, fitted)),
                "held_out_rows": stats(errors(pairs, *small_fit, large)),
            },
            "leave_one_out": stats(loo),
            "mixed_iteration_share_pct_max": round(
                max(100.0 * p["replay"].mixed_ms / p["replay"].kernel_ms for p in pts), 1
            ),
        }
        for p, m, e in zip(pts, measured, loo, strict=True):
            r = p["replay"]
            sim_ms = with_overhead(r, *shipped)
            points.append(
                {
                    "profile": name,
                    "length": p["length"],
                    "batch": p["batch"],
                    "fitted": p["fitted"],
                    "measured_s": round(m / 1000.0, 3),
                    "simulated_s": round(sim_ms / 1000.0, 3),
                    "error_pct": round(100.0 * (sim_ms - m) / m, 1),
                    "leave_one_out_error_pct": round(e, 1),
                    "preemptions": r.preemptions,
                    "mixed_iteration_share_pct": round(100.0 * r.mixed_ms / r.kernel_ms, 1),
                }
            )
    print(
        json.dumps(
            {
                "benchmark": "simulator vs measured vLLM static-batch latency",
                "source": "argonne-lcf/LLM-Inference-Bench 4211f5d4 Plots/All_results.csv",
                "summary": summary,
                "points": points,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
