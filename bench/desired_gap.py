"""Desired replicas' replay against what the pool really attained, on the autoscaling ramp. JSON.

    .venv/bin/python bench/desired_gap.py [--seed 7] [--desired-target 0.70] [any option of
        bench/autoscale.py]

Runs ``headroom-desired`` on one seed of one shape of ``bench/autoscale.py`` (same options, same
defaults; ``--seed`` picks the seed) and, at every estimate, replays the window's requests on
the pods then *ready* (the count the replay is checked against; the bisection rarely evaluates
it) with the estimate's calibrated pod. After the run it sets beside each replay the true SLO
attainment of the requests that arrived in the same window, from the run's outcomes (requests
still in flight at the estimate included). Reported: the gap (replay less truth) over the
estimates after the warm-up, and each estimate's replayed attainment at the counts the
bisection tried, which show the shape of the curve it searches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _common import machine
from autoscale import arguments, desired_options, one_run, slo

from backend.sim.autoscale import DesiredReplicas, Observation
from backend.sim.fromsamples import simulate


@dataclass
class Recording(DesiredReplicas):
    """``DesiredReplicas`` that also replays each window on the ready pods."""

    seen: list[dict[str, Any]] = field(default_factory=list)

    def desired(self, obs: Observation) -> int:
        made = len(self.runs)
        want = super().desired(obs)
        if len(self.runs) > made:
            est = self.runs[-1]
            ready = len(obs.gauges)
            replay = est.desired.evaluated.get(ready)
            if replay is None and ready:
                trace, pod = est.replayed or est.workload.trace, est.calibration.pod
                try:
                    replay = simulate(trace, ready, pod, self.router, self.slo).slo_attainment
                except (RuntimeError, MemoryError):
                    replay = 0.0  # the simulated pods break down: as desired_replicas counts it
            self.seen.append(
                {
                    "t": obs.now,
                    "ready": ready,
                    "want": want,
                    "replay_at_ready": replay,
                    "evaluated": {n: round(a, 3) for n, a in sorted(est.desired.evaluated.items())},
                }
            )
        return want


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--shape", choices=("ramp", "step"), default="ramp")
    own, rest = parser.parse_known_args()
    args = arguments(rest)
    scaler = Recording(slo(args), **desired_options(args))
    started = time.process_time()
    result = one_run(args, own.shape, scaler, own.seed)
    arrival = result.outcomes.arrival
    rows = []
    for s in scaler.seen:
        inside = (arrival >= s["t"] - scaler.lookback_s) & (arrival < s["t"])
        truth = float(result.ok[inside].mean()) if inside.any() else None
        rows.append({**s, "true_attainment": truth})
    measured = [
        r["replay_at_ready"] - r["true_attainment"]
        for r in rows
        if r["t"] >= args.warmup_s and r["replay_at_ready"] is not None and r["true_attainment"]
    ]
    gap = np.asarray(measured)
    print(
        json.dumps(
            {
                "machine": machine(),
                "config": {**vars(args), "seed": own.seed, "shape": own.shape},
                "run": {
                    "attainment": round(result.attainment, 4),
                    "gpu_hours": round(result.gpu_hours, 4),
                    "cpu_s": round(time.process_time() - started, 1),
                },
                "replay_less_truth_at_ready_pods": {
                    "estimates": len(gap),
                    "mean": round(float(gap.mean()), 4),
                    "median": round(float(np.median(gap)), 4),
                    "p10": round(float(np.percentile(gap, 10)), 4),
                    "p90": round(float(np.percentile(gap, 90)), 4),
                    "mean_abs": round(float(np.abs(gap).mean()), 4),
                },
                "estimates": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    sys.exit(main())
