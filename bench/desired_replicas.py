"""Desired replicas' cost: one run of the worker's computation for an 8-pod pool.

Simulates ``--lookback`` seconds of a trace on ``--pods`` pods and keeps the samples an llm-d
EPP would post (``backend.sim.replay.Recorder``), then times what the periodic job does with a
pool's samples (``backend.capacity.desired.estimate``: rebuild the requests, calibrate the pod
over the shipped profiles, bisect on the pod count) in CPU seconds of this one process.
Target: within 60 s of one core. Prints JSON.

    .venv/bin/python bench/desired_replicas.py [--trace mooncake-conversation --load 0.5]
"""

from __future__ import annotations

import argparse
import json
import time

from _common import machine

from backend.capacity.desired import estimate
from backend.settings import CapacitySettings
from backend.sim.fromsamples import record, rows_from_observations
from backend.sim.replay import DEFAULT_SLO
from backend.sim.traces.loader import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trace", default="mooncake-conversation")
    ap.add_argument("--load", type=float, default=0.5)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--gpu", default="a100-llama3-8b")
    ap.add_argument("--lookback", type=float, default=300.0, help="the job's default window")
    ap.add_argument("--target", type=float, default=0.95)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    settings = CapacitySettings(desired_lookback_s=args.lookback)
    trace = load_trace(args.trace).scaled(args.load).window(0.0, args.lookback)
    _, observations = record(trace, args.pods, args.gpu, settings.desired_router, DEFAULT_SLO)
    rows = rows_from_observations(observations)
    runs = []
    for _ in range(args.repeat):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        est = estimate(rows, DEFAULT_SLO, args.target, settings)
        assert est is not None
        runs.append(
            {
                "cpu_s": round(time.process_time() - cpu0, 2),
                "wall_s": round(time.perf_counter() - wall0, 2),
                "replicas": est.replicas,
                "met": est.met,
                "attainment": round(est.attainment, 4),
                "profile": est.profile,
                "scale": round(est.scale, 3),
                "calibration_error": round(est.calibration_error, 4),
                "simulations": est.simulations,
            }
        )
    print(
        json.dumps(
            {
                "machine": machine(),
                "trace": args.trace,
                "load": args.load,
                "pods": args.pods,
                "true_gpu": args.gpu,
                "lookback_s": args.lookback,
                "samples": len(rows),
                "router": settings.desired_router,
                "target": args.target,
                "runs": runs,
                "max_cpu_s": max(r["cpu_s"] for r in runs),
                "within_60_s": max(r["cpu_s"] for r in runs) <= 60.0,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
