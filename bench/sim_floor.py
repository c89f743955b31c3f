"""The present-state floor of prediction error beside the live error, in the simulator. JSON.

    .venv/bin/python bench/sim_floor.py [--trace mooncake-conversation] [--load 1] [--limit 3000]
        [--policy headroom] [--seed 0] [--floor-every 10] [--warmup-s 60]
        [--no-noise] [--no-spread] [--no-delay]

Replays the first ``--limit`` requests of a shipped trace on 8 ``a100-llama3-8b`` pods with one
policy. Every ``--floor-every``-th request dispatched after ``--warmup-s`` simulated seconds is
also run on a noise-free copy of its pod with no later arrivals (``SimConfig.floor_every``); the
error of that outcome against the real one is what no predictor that knows only the present can
remove. Prints, per target, the floor's and the live predictions' MAPE, median bias and p90
absolute error, overall and per load decile (``SimResult.prediction_error``), and the run's
wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.predictor.live_bias import high_load_bias
from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import make_policy
from backend.sim.traces import TRACE_NAMES, TenantModel, load_trace
from backend.sim.view import Slo


def _describe_top(
    sim: Simulation, result: Any, actual: Any, predicted: Any, threshold: float
) -> dict[str, Any]:
    """What the top load decile's requests were: when they arrived, their output lengths, the
    prefill tokens in flight on their pod as routing saw it, measured and predicted (medians)."""
    ok = np.isfinite(actual) & np.isfinite(predicted) & (predicted > 0) & (actual > 0)
    rows = np.flatnonzero(ok & (result.dispatch_load >= threshold))
    routes = [sim.routes[i] for i in rows]
    in_flight = [r.tpot_row[5] for r in routes if r is not None and r.tpot_row is not None]
    return {
        "arrival_s_p10_p50_p90": np.percentile(result.arrival[rows], [10, 50, 90])
        .round(1)
        .tolist(),
        "run_span_s": round(float(np.nanmax(result.arrival)), 1),
        "median_output_tokens": float(np.median(result.output[rows])),
        "median_prefill_tokens_in_flight": float(np.median(in_flight)) if in_flight else None,
        "median_measured_ms": round(float(np.median(actual[rows])), 1),
        "median_predicted_ms": round(float(np.median(predicted[rows])), 1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    pool = build_pool(args.pods, args.gpu)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    tenants = TenantModel(seed=args.seed) if args.trace.startswith("azure") else None
    trace = load_trace(args.trace, tenants).head(args.limit).scaled(args.load)
    options: dict[str, Any] = {
        "seed": args.seed,
        "transfer": fabric,
        "floor_every": args.floor_every,
        "floor_warmup_s": args.warmup_s,
        "spread_ties": not args.no_spread,
    }
    if args.no_noise:
        options["step_noise"] = 0.0
    if args.no_delay:
        options["dispatch_delay_ms"] = 0.0
    sim = Simulation(
        trace,
        pool,
        make_policy(args.policy, fabric, args.seed),
        SimConfig(Slo(args.ttft_slo_ms, args.tpot_slo_ms), **options),
    )
    started = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - started
    error = result.prediction_error()
    brief = {
        target: {
            name: {k: error[target][name].get(k) for k in ("n", "mape_pct", "median_bias_pct")}
            for name in ("floor", "live_sampled", "live")
        }
        for target in ("ttft", "tpot")
    }
    # What the console's "bias at high load" reports (backend/predictor/live_bias.py): the
    # live median bias in the top decile of the chosen pod's load at dispatch.
    for target, actual, predicted in (
        ("ttft", result.ttft_ms, result.predicted_ttft_ms),
        ("tpot", result.tpot_ms, result.predicted_tpot_ms),
    ):
        top = high_load_bias(actual, predicted, result.dispatch_load)
        brief[target]["live_top_load_decile"] = {
            "n": top.n if top else 0,
            "median_bias_pct": round(100 * top.bias, 2) if top else None,
            **(_describe_top(sim, result, actual, predicted, top.load_threshold) if top else {}),
        }
    return {
        "run": {
            "trace": args.trace,
            "limit": args.limit,
            "load": args.load,
            "policy": args.policy,
            "seed": args.seed,
            "pool": f"{args.pods} x {args.gpu}",
            "step_noise": sim.config.step_noise,
            "spread_ties": sim.config.spread_ties,
            "dispatch_delay_ms": round(sim.dispatch_delay_s * 1000.0, 3),
            "floor_every": args.floor_every,
            "floor_warmup_s": args.warmup_s,
            "preemptions": sum(p["preemptions"] for p in result.pods),
            "wall_s": round(wall, 2),
        },
        "summary": brief,
        "prediction_error": error,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake-conversation", choices=TRACE_NAMES)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--policy", default="headroom")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--gpu", default="a100-llama3-8b")
    parser.add_argument("--floor-every", type=int, default=10)
    parser.add_argument("--warmup-s", type=float, default=60.0)
    parser.add_argument("--ttft-slo-ms", type=float, default=2000.0)
    parser.add_argument("--tpot-slo-ms", type=float, default=100.0)
    parser.add_argument("--no-noise", action="store_true", help="step_noise = 0")
    parser.add_argument("--no-spread", action="store_true", help="keep tied arrivals tied")
    parser.add_argument("--no-delay", action="store_true", help="no predictor-call delay")
    parser.add_argument("--full", action="store_true", help="print the per-decile tables too")
    args = parser.parse_args(argv)
    data = run(args)
    if not args.full:
        data.pop("prediction_error")
    print(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
