"""Replay fidelity: does a replay built from a pool's samples alone reproduce the pool?

For each (trace, load): run the trace's first ``--duration`` seconds in the simulator with a
policy on ``--pods`` pods of the true profile, recording the samples an llm-d EPP would post
(``backend.sim.replay.Recorder``); build the replay from those samples alone
(``backend.sim.fromsamples.build_workload``), calibrate the simulated pod to them (profile and
scale factor, ``calibrate``), replay the same policy on it and compare SLO attainment with the
original run's, over several seeds. The calibration is chosen on the samples (as the service
does), never on the original run's attainment. Prints JSON.

    .venv/bin/python bench/replay_fidelity.py [--duration 300] [--seeds 0,1]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
from _common import machine

from backend.sim.fromsamples import (
    build_workload,
    calibrate,
    record,
    rows_from_observations,
    simulate,
)
from backend.sim.replay import DEFAULT_SLO
from backend.sim.report import summarize
from backend.sim.traces.loader import load_trace

REPLAY_SEED_OFFSET = 1000


def original(
    trace_name: str, load: float, duration_s: float, pods: int, gpu: str, policy: str, seed: int
) -> tuple[float, list[Any]]:
    """The original run's SLO attainment and the samples its EPP would have posted."""
    trace = load_trace(trace_name).scaled(load).window(0.0, duration_s)
    result, observations = record(trace, pods, gpu, policy, DEFAULT_SLO, seed)
    return float(summarize(result, DEFAULT_SLO)["slo_attainment"]), observations


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--suites",
        default="mooncake-conversation:1.0,mooncake-conversation:2.0,azure-code:1.0,azure-code:2.0",
    )
    ap.add_argument("--duration", type=float, default=300.0, help="simulated seconds per run")
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--gpu", default="a100-llama3-8b")
    ap.add_argument("--policy", default="least-request")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--steps", type=int, default=4, help="golden-section steps per profile")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, Any] = {
        "machine": machine(),
        "policy": args.policy,
        "true_gpu": args.gpu,
        "pods": args.pods,
        "duration_s": args.duration,
        "scale_note": "reduced scale: the first --duration simulated seconds of each trace",
        "suites": [],
    }
    for suite in args.suites.split(","):
        name, _, load = suite.partition(":")
        runs = []
        for seed in seeds:
            t0 = time.process_time()
            truth, observations = original(
                name, float(load), args.duration, args.pods, args.gpu, args.policy, seed
            )
            # The replay draws its own randomness (step noise, the policy's): the original run's
            # seed would replay its exact noise.
            other = seed + REPLAY_SEED_OFFSET
            workload = build_workload(rows_from_observations(observations), seed=other)
            cal = calibrate(workload, args.policy, DEFAULT_SLO, steps=args.steps, seed=other)
            replayed = simulate(
                workload.trace, len(workload.pods), cal.pod, args.policy, DEFAULT_SLO, other
            ).slo_attainment
            runs.append(
                {
                    "seed": seed,
                    "original_attainment": round(truth, 4),
                    "replay_attainment": round(replayed, 4),
                    "gap_points": round(100 * (replayed - truth), 2),
                    "calibration": cal.summary(),
                    "workload": workload.summary(),
                    "cpu_s": round(time.process_time() - t0, 1),
                }
            )
        gaps = np.array([r["gap_points"] for r in runs])
        out["suites"].append(
            {
                "trace": name,
                "load": float(load),
                "runs": runs,
                "mean_abs_gap_points": round(float(np.abs(gaps).mean()), 2),
                "max_abs_gap_points": round(float(np.abs(gaps).max()), 2),
                "within_3_points": bool(np.abs(gaps).max() <= 3.0),
            }
        )
        print(json.dumps(out["suites"][-1]), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
