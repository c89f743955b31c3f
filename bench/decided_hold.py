"""How long /v1/schedule should hold its decisions: Headroom's policy at several holds on the
protocol's tuning slice (slice 0), several seeds. JSON lines, one per hold.

    .venv/bin/python bench/decided_hold.py --suite azure:4 --seeds 0,1,2,3 \
        --holds 0,1.15,2,5,10,25,50,100

A decision is held ``decided_hold_ms`` in the ledger (backend/scheduling/decided.py) and counts
in its pod's in-flight work meanwhile; the simulator dispatches a request 1.15 ms after its
decision. Printed per hold: the live TTFT MAPE on the floor's sampled requests and on every
request with a prediction, the floor's, the worst load decile's |median bias|, live TPOT MAPE
and SLO attainment, each the mean over the seeds, and the runs. The evaluation slices are
``bench/live_accuracy.py``'s (the hold chosen here is the default there).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.sim.protocol import SUITES, Job, _pool, arrivals, figures, machine, simulate_trace
from backend.sim.routers import OURS, POLICIES
from backend.sim.view import Slo

SIM = (("floor_every", 10), ("floor_warmup_s", 60.0))


def run(suite: str, load: float, seed: int, hold_ms: float) -> dict[str, Any]:
    s = SUITES[suite]
    job = Job(s, 0, s.slice_requests, load, OURS, (), seed, SIM)
    slo = Slo(s.ttft_slo_ms, s.tpot_slo_ms)
    result = simulate_trace(
        arrivals(job),
        list(_pool(s)),
        slo,
        lambda t: POLICIES[OURS](t, seed, {"decided_hold_ms": hold_ms}),
        seed,
        dict(SIM),
    )
    e = result.prediction_error()
    deciles = [d["median_bias_pct"] for d in e["ttft"]["live"]["by_load_decile"]]
    return {
        "seed": seed,
        "ttft_sampled_mape_pct": e["ttft"]["live_sampled"]["mape_pct"],
        "ttft_all_mape_pct": e["ttft"]["live"]["mape_pct"],
        "ttft_floor_mape_pct": e["ttft"]["floor"]["mape_pct"],
        "ttft_worst_decile_abs_bias_pct": max(abs(b) for b in deciles if b is not None),
        "tpot_sampled_mape_pct": e["tpot"]["live_sampled"]["mape_pct"],
        "slo_attainment": figures(result, slo)["slo_attainment"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="azure:4", help="suite:load")
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--holds", default="0,1.15,2,5,10,25,50,100", help="milliseconds")
    args = parser.parse_args(argv)
    suite, _, load = args.suite.partition(":")
    seeds = [int(x) for x in args.seeds.split(",")]
    for hold in (float(h) for h in args.holds.split(",")):
        runs = [run(suite, float(load), seed, hold) for seed in seeds]
        means = {k: round(float(np.mean([r[k] for r in runs])), 3) for k in runs[0] if k != "seed"}
        line = {"suite": suite, "load": float(load), "hold_ms": hold, **means, "runs": runs}
        print(json.dumps(line), flush=True)
    print(json.dumps({"machine": machine()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
