"""How sensitive a routing comparison is to the pod's step costs. Prints JSON and a table.

    .venv/bin/python bench/sim_sensitivity.py [--trace mooncake-conversation] [--load 1]
        [--limit 3000] [--seeds 0] [--policies headroom,llm-d-predicted,dynamo-kv,llm-d-322]
        [--jobs 2]

No measured data checks mixed prefill-and-decode iterations directly (``bench/sim_validate.py``
only sees them inside static batches), so the comparison is rerun with the decode share and the
prefill share of every iteration's cost scaled by 0.7 and 1.3, one at a time
(``SimConfig.decode_scale`` / ``prefill_scale``), everything else at the benchmark's defaults
(vLLM V1 pod, step noise, tied arrivals spread, predictor-call delay). ``ties kept`` reruns the
1.0x costs with the trace's tied arrivals left tied (``SimConfig.spread_ties = False``), and
``... no delay`` without the predictor call's dispatch delay (``dispatch_delay_ms = 0``). For each
setting: every policy's SLO attainment and TTFT p90 (mean over the seeds) and the ranking by SLO
attainment; ``flips`` lists the settings whose ranking differs from the first one's (by default
1.0x).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.report import summarize
from backend.sim.routers import make_policy
from backend.sim.traces import TRACE_NAMES, TenantModel, load_trace
from backend.sim.view import Slo

# decode scale, prefill scale, spread ties, dispatch delay (None: the policy's predictor call)
SETTINGS: dict[str, tuple[float, float, bool, float | None]] = {
    "1.0x": (1.0, 1.0, True, None),
    "decode 0.7x": (0.7, 1.0, True, None),
    "decode 1.3x": (1.3, 1.0, True, None),
    "prefill 0.7x": (1.0, 0.7, True, None),
    "prefill 1.3x": (1.0, 1.3, True, None),
    "ties kept": (1.0, 1.0, False, None),
    "ties kept + no delay": (1.0, 1.0, False, 0.0),
    "no delay": (1.0, 1.0, True, 0.0),
}
SLO = Slo(2000.0, 100.0)


def one(job: tuple[str, float, int, str, int, str]) -> dict[str, Any]:
    trace_name, load, limit, policy, seed, setting = job
    decode, prefill, spread, delay = SETTINGS[setting]
    pool = build_pool(8, "a100-llama3-8b")
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    tenants = TenantModel(seed=seed) if trace_name.startswith("azure") else None
    trace = load_trace(trace_name, tenants).head(limit).scaled(load)
    config = SimConfig(
        SLO,
        seed=seed,
        transfer=fabric,
        decode_scale=decode,
        prefill_scale=prefill,
        spread_ties=spread,
        dispatch_delay_ms=delay,
    )
    result = Simulation(trace, pool, make_policy(policy, fabric, seed), config).run()
    row = summarize(result, SLO)
    return {
        "policy": policy,
        "seed": seed,
        "setting": setting,
        "slo_attainment": row["slo_attainment"],
        "ttft_p90_ms": row["ttft_ms"]["p90"],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="mooncake-conversation", choices=TRACE_NAMES)
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--policies", default="headroom,llm-d-predicted,dynamo-kv,llm-d-322")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--settings", default=",".join(SETTINGS), help="which of the settings")
    args = parser.parse_args(argv)
    policies = args.policies.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = args.settings.split(",")
    unknown = set(settings) - set(SETTINGS)
    if unknown:
        parser.error(f"unknown settings {sorted(unknown)}; available: {', '.join(SETTINGS)}")
    jobs = [
        (args.trace, args.load, args.limit, p, s, label)
        for label in settings
        for p in policies
        for s in seeds
    ]
    with ProcessPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(one, jobs))
    table: dict[str, dict[str, Any]] = {}
    for label in settings:
        rows: dict[str, dict[str, Any]] = {}
        for p in policies:
            mine = [r for r in runs if r["policy"] == p and r["setting"] == label]
            slo = [r["slo_attainment"] for r in mine]
            rows[p] = {
                "slo_attainment": round(statistics.fmean(slo), 4),
                "slo_attainment_min_max": [min(slo), max(slo)],
                "ttft_p90_ms": round(statistics.fmean(r["ttft_p90_ms"] for r in mine), 1),
            }
        ranking = sorted(policies, key=lambda p: -rows[p]["slo_attainment"])
        table[label] = {"policies": rows, "ranking": ranking}
    base = table[settings[0]]["ranking"]
    print(
        json.dumps(
            {
                "run": vars(args),
                "table": table,
                "reference": settings[0],
                "flips": [k for k, v in table.items() if v["ranking"] != base],
            },
            indent=1,
        )
    )
    for label, v in table.items():
        cells = " | ".join(
            f"{p} {100 * v['policies'][p]['slo_attainment']:.1f} %" for p in v["ranking"]
        )
        print(f"| {label} | {cells} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
