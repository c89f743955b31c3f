"""Replay fidelity: does a replay built from a pool's samples alone reproduce the pool?

For each (suite, load) and each evaluation slice of the benchmark protocol
(``backend.sim.protocol``: slice ``i`` of ``--requests`` requests runs with seed ``i - 1``;
slice 0 is the tuning slice, where this check's design was chosen, so it is not reported by
default): run the slice on the suite's pool (8 pods of its GPU, its SLOs) with ``--policy``,
recording the samples an llm-d EPP would post (``backend.sim.replay.Recorder``); build the
replay from those samples alone (``backend.sim.fromsamples.build_workload``), calibrate the
simulated pod to them (``calibrate``: profile, then prefill and decode factors), replay the same
policy on it with the replay's own seed and compare SLO attainment with the original run's.
The calibration is chosen on the samples (as the service does), never on the original run's
attainment. Prints JSON lines per run and per (suite, load), then the whole result.

    nice -n 15 .venv/bin/python bench/replay_fidelity.py --suites mooncake:0.75,azure:3.0 \
        --requests 1000 --slices 1,2,3
"""

from __future__ import annotations

import argparse
import dataclasses
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
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.report import summarize
from backend.sim.view import Slo

REPLAY_SEED_OFFSET = 1000
"""The replay draws its own randomness (step noise, the policy's): the original run's seed
would replay its exact noise."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="mooncake:0.75,mooncake:1.0,azure:3.0,azure:4.0")
    ap.add_argument("--requests", type=int, default=1000, help="requests per slice")
    ap.add_argument("--slices", default="1,2,3", help="protocol slices (0: the tuning slice)")
    ap.add_argument("--policy", default="least-request")
    ap.add_argument("--steps", type=int, default=4, help="coarse golden-section steps")
    ap.add_argument("--calibration", choices=("split", "joint"), default="split")
    args = ap.parse_args()
    slices = [int(s) for s in args.slices.split(",")]
    out: dict[str, Any] = {
        "machine": machine(),
        "policy": args.policy,
        "calibration": args.calibration,
        "scale": f"reduced: {args.requests} requests per slice, slices {args.slices}",
        "suites": [],
    }
    for item in args.suites.split(","):
        name, _, load_text = item.partition(":")
        load = float(load_text)
        suite = dataclasses.replace(SUITES[name], slice_requests=args.requests)
        slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
        runs = []
        for index in slices:
            t0 = time.process_time()
            seed = max(0, index - 1)
            trace = arrivals(Job(suite, index, args.requests, load, "", (), seed, ()))
            result, observations = record(trace, suite.pods, suite.gpu, args.policy, slo, seed)
            truth = float(summarize(result, slo)["slo_attainment"] or 0.0)
            other = seed + REPLAY_SEED_OFFSET
            workload = build_workload(rows_from_observations(observations), seed=other)
            cal = calibrate(
                workload, args.policy, slo, steps=args.steps, seed=other, mode=args.calibration
            )
            replayed = simulate(
                workload.trace, len(workload.pods), cal.pod, args.policy, slo, other
            ).slo_attainment
            run = {
                "slice": index,
                "seed": seed,
                "original_attainment": round(truth, 4),
                "replay_attainment": round(replayed, 4),
                "gap_points": round(100 * (replayed - truth), 2),
                "calibration": cal.summary(),
                "workload": workload.summary(),
                "cpu_s": round(time.process_time() - t0, 1),
            }
            runs.append(run)
            print(json.dumps({"suite": name, "load": load, **run}), flush=True)
        gaps = np.array([r["gap_points"] for r in runs])
        original = [r["original_attainment"] for r in runs]
        replayed = [r["replay_attainment"] for r in runs]
        summary = {
            "suite": name,
            "trace": suite.trace,
            "load": load,
            "runs": runs,
            "original_mean": round(100 * float(np.mean(original)), 2),
            "replay_mean": round(100 * float(np.mean(replayed)), 2),
            "mean_gap_points": round(float(gaps.mean()), 2),
            "gap_min_max": [round(float(gaps.min()), 2), round(float(gaps.max()), 2)],
            "mean_within_3_points": bool(abs(gaps.mean()) <= 3.0),
            "every_run_within_3_points": bool(np.abs(gaps).max() <= 3.0),
        }
        out["suites"].append(summary)
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
