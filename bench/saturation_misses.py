"""Where the misses are past saturation, and what the models hold at the end of the run: one
simulation per policy and seed of the saturation calibration's setting. JSON lines.

    .venv/bin/python bench/saturation_misses.py [--trace azure-code] [--load 1.589] \
        [--policies headroom,headroom-no-hold] [--seeds 0,1]

The setting of ``bench/saturation_calibration.py`` at 1.2x on Azure code (4 ``a100-llama3-8b``
pods, the first 1,000 requests, SLO 1 s TTFT / 100 ms TPOT; 1.2 x 1.324 = 1.589). Printed per
run: the shares of requests missing the TTFT and the TPOT SLO, the median predicted and measured
TPOT of those missing it, and each predictor's live calibration at the end (load-band edges,
the per-band correction of the mean, the per-band p90 of actual / served mean).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import make_policy
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces.loader import TenantModel, load_trace
from backend.sim.view import Slo

TTFT_SLO_MS, TPOT_SLO_MS = 1000.0, 100.0


def run(trace: str, load: float, policy_name: str, seed: int) -> dict[str, Any]:
    pool = build_pool(4, "a100-llama3-8b")
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    tenants = TenantModel(seed=seed) if trace.startswith("azure") else None
    requests = load_trace(trace, tenants).head(1000).scaled(load)
    policy = make_policy(policy_name, fabric, seed)
    config = SimConfig(Slo(TTFT_SLO_MS, TPOT_SLO_MS), seed=seed, transfer=fabric)
    result = Simulation(requests, pool, policy, config).run()
    late = result.ttft_ms > TTFT_SLO_MS
    slow = np.nan_to_num(result.tpot_ms) > TPOT_SLO_MS
    models: dict[str, Any] = {}
    if isinstance(policy, PredictedLatency):
        for key, predictor in policy.predictors.items():
            for target in ("ttft", "tpot"):
                model = predictor.models[target]
                c = model.calibration if model is not None else None
                if c is not None:
                    models[f"{key or 'pool'}/{target}"] = {
                        "edges": [round(e, 1) for e in c.edges],
                        "correction": [round(x, 2) for x in c.correction],
                        "p90_ratio": [
                            round(float(x), 2) for x in c.upper(np.asarray((*c.edges, 1e9)))
                        ],
                    }
    return {
        "policy": policy_name,
        "seed": seed,
        "ttft_miss": round(float(late.mean()), 3),
        "tpot_miss": round(float(slow.mean()), 3),
        "either_miss": round(float((late | slow).mean()), 3),
        "tpot_missers_predicted_ms": round(float(np.nanmedian(result.predicted_tpot_ms[slow])), 1),
        "tpot_missers_measured_ms": round(float(np.nanmedian(result.tpot_ms[slow])), 1),
        "calibration": models,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="azure-code")
    parser.add_argument("--load", type=float, default=1.589)
    parser.add_argument("--policies", default="headroom,headroom-no-hold")
    parser.add_argument("--seeds", default="0,1")
    args = parser.parse_args(argv)
    for name in args.policies.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            print(json.dumps(run(args.trace, args.load, name, seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
