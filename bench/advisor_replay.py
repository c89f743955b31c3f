"""The advisor on a pool's own traffic, checked against the run the traffic came from.

1. **The original run.** A simulated pool of the protocol suite (``mooncake`` by default: 8
   pods of its GPU, its SLOs, its higher tuning load) serves ``(seeds + 1) * requests`` requests
   of its trace under the active policy (upstream's defaults: the predicted-latency chain as a
   new pool gets it), and the samples an EPP would post are collected
   (``backend.sim.fromsamples.record``).
2. **The replay.** From those samples alone: the workload (``build_workload``), the calibrated
   pod (``calibrate``, desired replicas' coarse steps, routed by the policy that recorded the
   samples unless ``--calibrate-with desired-router``), the advisor's parts
   (``backend.advisor.workloads.replay_workload``, as ``pool-replay`` builds them).
3. **The advice** on the replay (``backend.advisor.search.advise``).
4. **The same policies on the original run.** Every ranked candidate runs again on the
   original trace cut the same way (the same held-out parts and seeds), on the original pool.
   Whether the replay's ranking holds there is what the replay is for.

Prints JSON (and writes it with ``--out``). Reduced scale: say so when quoting it.

    python bench/advisor_replay.py --requests 200 --seeds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.advisor.search import Budget, advise
from backend.advisor.workloads import SHIPPED, replay_parts, replay_workload
from backend.policies.service import PRESETS
from backend.settings import CapacitySettings
from backend.sim.fromsamples import (
    CALIBRATION_STEPS,
    build_workload,
    calibrate,
    record,
    rows_from_observations,
)
from backend.sim.pool import build_pool
from backend.sim.protocol import SUITES, Job, arrivals, figures, simulate_trace
from backend.sim.routers import OURS, POLICIES
from backend.sim.view import Slo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SHIPPED), default="mooncake")
    parser.add_argument("--requests", type=int, default=200, help="requests per part")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--survivors", type=int, default=3)
    parser.add_argument("--finalists", type=int, default=2)
    parser.add_argument(
        "--calibrate-with",
        choices=("recording", "desired-router"),
        default="recording",
        help="route the calibration as the recorded pool did (its policy), or with desired "
        "replicas' router (llm-d-322; what the advisor used before)",
    )
    parser.add_argument(
        "--calibration", choices=("split", "joint"), default="split", help="cost factors"
    )
    parser.add_argument(
        "--load", type=float, help="x the trace's rate (default: the suite's higher tuning load)"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    budget = Budget(args.requests, args.seeds, args.survivors, args.finalists)
    active = PRESETS["upstream"]  # the recorded pool routes by upstream's defaults
    started = time.process_time()

    total = (budget.seeds + 1) * budget.requests
    suite = dataclasses.replace(SUITES[SHIPPED[args.suite]], slice_requests=total)
    load = args.load if args.load is not None else suite.tuning_loads[-1]
    original = arrivals(Job(suite, 0, total, load, "", (), 0, ()))
    slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
    _, observations = record(original, suite.pods, suite.gpu, OURS, slo)

    replay = build_workload(rows_from_observations(observations))
    router = OURS if args.calibrate_with == "recording" else CapacitySettings().desired_router
    cal = calibrate(replay, router, slo, steps=CALIBRATION_STEPS, mode=args.calibration)
    fallback = None if args.calibrate_with == "recording" else "--calibrate-with desired-router"
    workload = replay_workload(replay, cal, slo, budget, router, fallback)
    advice = advise(workload, active, budget, lambda f, m: print(f"[{f:.0%}] {m}", file=sys.stderr))

    # The same candidates on the original run's traffic, cut the same way, on the original pool.
    parts = replay_parts(original, budget.seeds + 1, budget.requests)
    pool = list(build_pool(suite.pods, suite.gpu))
    rows = []
    for row in advice["ranking"]:
        factory = POLICIES[row["policy"]]
        options = dict(row["options"])
        runs = [
            figures(
                simulate_trace(
                    parts[i + 1],
                    pool,
                    slo,
                    lambda transfer, f=factory, s=seed, o=options: f(transfer, s, o),
                    seed,
                ),
                slo,
            )["slo_attainment"]
            for i, seed in enumerate(advice["seeds"])
        ]
        replayed = row["held_out"]["slo_attainment"]
        rows.append(
            {
                "label": row["label"],
                "kind": row["kind"],
                "replay": replayed,
                "original": {
                    "mean": round(float(np.mean(runs)), 4),
                    "min": min(runs),
                    "max": max(runs),
                },
                "points_replay_minus_original": round(100 * (replayed["mean"] - np.mean(runs)), 1),
            }
        )
    by_original = sorted(range(len(rows)), key=lambda i: -rows[i]["original"]["mean"])
    out: dict[str, Any] = {
        "scale": f"reduced: {budget.requests} requests per part, {budget.seeds} held-out parts",
        "calibrated_with": {"router": router, "mode": args.calibration},
        "suite": args.suite,
        "load": load,
        "pods": suite.pods,
        "budget": dataclasses.asdict(budget),
        "replay": workload.details,
        "label": workload.label,
        "pick": advice["pick"],
        "pick_rank_on_original": by_original.index(advice["pick"])
        if advice["pick"] is not None
        else None,
        "ranking": rows,
        "simulations": advice["simulations"],
        "cpu_s": round(time.process_time() - started, 1),
    }
    text = json.dumps(out, indent=2, default=float)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
