"""Live prediction error against the present-state floor, per load decile, for every predicted
policy, on the protocol's evaluation slices over several seeds. JSON.

    .venv/bin/python bench/live_accuracy.py [--suite azure:4,mooncake:1]
        [--policies headroom,llm-d-predicted-best] [--seeds 0,1,2] [--requests N] [--jobs 2]
        [--tuning-slice] [--sim NAME=VALUE,...]

Each ``suite:load`` pair replays evaluation slice ``i`` (``backend/sim/protocol.py``: the
slices after the tuning one) with seed ``seeds[i]``, with the benchmark's simulator defaults
(step-time noise on, tied arrivals spread, the measured predictor-call delay) and the floor
measured on every 10th request after 60 simulated seconds (``SimConfig.floor_every``). Policies
run with their default options (the protocol's tuning is not repeated here). ``--tuning-slice``
runs every seed on slice 0 instead, where an option is chosen before the evaluation slices
report it.

Printed per (suite, load, policy, target): the floor's and the live predictions' MAPE, median
bias and p90 absolute error on the sampled requests (like for like), mean and min-max over the
seeds; ``live_over_floor``, the ratio of the live MAPE to the floor's per seed; the live median
bias per load decile (all requests with a prediction) with its worst decile; and for TPOT, when
the policy's predictor gives a p90, the share of actuals under it per load decile; and the runs'
SLO attainment. Per seed besides, the cold start: SLO attainment and the live TTFT median bias
and MAPE of the requests arriving in the run's first ``EARLY_S`` seconds, while the first models
are young (the failure that stopped the prefill work left ahead: docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.sim.engine import FLOOR_EVERY, SimConfig, SimResult
from backend.sim.protocol import SUITES, Job, figures, machine, simulate
from backend.sim.report import met_slo
from backend.sim.routers import LLMD_PREDICTED_BEST, OURS
from backend.sim.view import Slo

FLOOR_WARMUP_S = SimConfig.floor_warmup_s
DEFAULT_RUNS = "azure:4,mooncake:1"
DEFAULT_POLICIES = f"{OURS},{LLMD_PREDICTED_BEST}"
EARLY_S = 120.0
"""The cold start: the first two minutes of arrivals (the first models train within seconds)."""


def run_one(
    suite: str,
    load: float,
    policy: str,
    replicate: int,
    seed: int,
    n: int,
    options: tuple[tuple[str, float], ...] = (),
) -> dict[str, Any]:
    """One simulation: evaluation slice ``replicate + 1`` at ``load`` with ``seed``, and the
    simulator's ``options`` (``SimConfig`` fields) besides the floor's."""
    sim = (("floor_every", FLOOR_EVERY), ("floor_warmup_s", FLOOR_WARMUP_S), *options)
    job = Job(SUITES[suite], replicate + 1, n, load, policy, (), seed, sim)
    started = time.perf_counter()
    result = simulate(job)
    s = SUITES[suite]
    return {
        "seed": seed,
        "slice": replicate + 1,
        "wall_s": round(time.perf_counter() - started, 2),
        "error": result.prediction_error(),
        # Routing's outcome beside its predictions' error: a change to what the router knows
        # changes its decisions too.
        "slo_attainment": figures(result, Slo(s.ttft_slo_ms, s.tpot_slo_ms))["slo_attainment"],
        "early": early(result, Slo(s.ttft_slo_ms, s.tpot_slo_ms)),
    }


def early(result: SimResult, slo: Slo) -> dict[str, float | None]:
    """The requests arriving in the first ``EARLY_S`` seconds: their SLO attainment, and the
    live TTFT error of those with a prediction (median bias and MAPE, percent)."""
    first = result.arrival < result.arrival.min() + EARLY_S
    actual = result.ttft_ms[first]
    predicted = result.predicted_ttft_ms[first]
    known = np.isfinite(predicted) & np.isfinite(actual) & (actual > 0)
    ratio = predicted[known] / actual[known] - 1.0
    return {
        "requests": int(first.sum()),
        "slo_attainment": round(float(met_slo(result, slo)[first].mean()), 4),
        "ttft_median_bias_pct": round(float(np.median(ratio)) * 100, 2) if known.any() else None,
        "ttft_mape_pct": round(float(np.mean(np.abs(ratio))) * 100, 2) if known.any() else None,
    }


def _stats(values: list[float | None]) -> dict[str, float | None]:
    v = [x for x in values if x is not None and np.isfinite(x)]
    if not v:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(float(np.mean(v)), 2), "min": round(min(v), 2), "max": round(max(v), 2)}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and min-max over the seeds of one (suite, load, policy)."""
    out: dict[str, Any] = {}
    for target in ("ttft", "tpot"):
        rows = [r["error"][target] for r in runs]
        row: dict[str, Any] = {}
        for name in ("floor", "live_sampled", "live"):
            row[name] = {
                k: _stats([r[name].get(k) for r in rows])
                for k in ("mape_pct", "median_bias_pct", "p90_abs_pct")
            }
        row["live_over_floor"] = _stats(
            [
                r["live_sampled"]["mape_pct"] / r["floor"]["mape_pct"]
                if r["floor"].get("mape_pct")
                else None
                for r in rows
            ]
        )
        deciles = [[d.get("median_bias_pct") for d in r["live"]["by_load_decile"]] for r in rows]
        per_decile = [_stats(list(col)) for col in zip(*deciles, strict=False)]
        row["live_median_bias_by_load_decile_pct"] = [d["mean"] for d in per_decile]
        row["live_mape_by_load_decile_pct"] = [
            _stats([r["live"]["by_load_decile"][i].get("mape_pct") for r in rows])["mean"]
            for i in range(len(per_decile))
        ]
        row["floor_mape_by_load_decile_pct"] = [
            _stats([r["floor"]["by_load_decile"][i].get("mape_pct") for r in rows])["mean"]
            if all(len(r["floor"]["by_load_decile"]) > i for r in rows)
            else None
            for i in range(len(per_decile))
        ]
        row["worst_decile_abs_median_bias_pct"] = max(
            (abs(d["mean"]) for d in per_decile if d["mean"] is not None), default=None
        )
        out[target] = row
    out["slo_attainment"] = _stats([r["slo_attainment"] for r in runs])
    # Per seed, for rules that ask how many seeds moved, not only the mean.
    out["per_seed"] = [
        {
            "seed": r["seed"],
            "slice": r["slice"],
            "ttft_live_mape_pct": r["error"]["ttft"]["live"].get("mape_pct"),
            "ttft_live_sampled_mape_pct": r["error"]["ttft"]["live_sampled"].get("mape_pct"),
            "ttft_floor_mape_pct": r["error"]["ttft"]["floor"].get("mape_pct"),
            "slo_attainment": r["slo_attainment"],
            "early": r["early"],
        }
        for r in runs
    ]
    out["early"] = {
        k: _stats([r["early"][k] for r in runs])
        for k in ("slo_attainment", "ttft_median_bias_pct", "ttft_mape_pct")
    }
    coverage = [r["error"]["tpot_p90_coverage"] for r in runs]
    if any("share_pct" in c for c in coverage):
        out["tpot"]["p90_coverage"] = {
            "share_pct": _stats([c.get("share_pct") for c in coverage]),
            "by_load_decile_pct": [
                _stats(list(col))["mean"]
                for col in zip(
                    *[c["by_load_decile_pct"] for c in coverage if "by_load_decile_pct" in c],
                    strict=False,
                )
            ],
        }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default=DEFAULT_RUNS, help="suite:load pairs, comma-separated")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--requests", type=int, default=None, help="per slice (default: suite's)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--tuning-slice",
        action="store_true",
        help="every seed on the protocol's tuning slice (slice 0), for choosing an option",
    )
    parser.add_argument(
        "--sim",
        default="",
        help="simulator options NAME=VALUE,... (SimConfig fields, numbers), for example "
        "retrain_interval_s=10.01: a change that alters no information, only the runs' "
        "trajectories, to measure how far seeds swing under a neutral change",
    )
    args = parser.parse_args(argv)
    options = []
    for item in filter(None, args.sim.split(",")):
        name, _, value = item.partition("=")
        try:
            options.append((name.strip(), float(value)))
        except ValueError:
            parser.error(f"--sim wants NAME=NUMBER, got {item!r}")
    pairs = []
    for item in args.suite.split(","):
        name, _, load = item.partition(":")
        if name not in SUITES or not load:
            parser.error(f"--suite wants suite:load with a suite among {', '.join(SUITES)}")
        pairs.append((name, float(load)))
    policies = [p for p in args.policies.split(",") if p]
    seeds = [int(s) for s in args.seeds.split(",")]
    jobs = [
        (
            name,
            load,
            policy,
            -1 if args.tuning_slice else i,
            seed,
            args.requests or SUITES[name].slice_requests,
            tuple(options),
        )
        for name, load in pairs
        for policy in policies
        for i, seed in enumerate(seeds)
    ]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(run_one, *zip(*jobs, strict=True)))
    by_key: dict[tuple[str, float, str], list[dict[str, Any]]] = {}
    for job, result in zip(jobs, results, strict=True):
        by_key.setdefault(job[:3], []).append(result)
    print(
        json.dumps(
            {
                "machine": machine(),
                "setup": {
                    "seeds": seeds,
                    "slices": "the tuning slice (0)" if args.tuning_slice else "evaluation",
                    "requests_per_slice": {
                        n: args.requests or SUITES[n].slice_requests for n, _ in pairs
                    },
                    "floor_every": FLOOR_EVERY,
                    "floor_warmup_s": FLOOR_WARMUP_S,
                    "simulator": "benchmark defaults: step noise on, tied arrivals spread",
                    "sim_options": dict(options),
                    "wall_s": round(time.perf_counter() - started, 1),
                },
                "results": [
                    {"suite": k[0], "load": k[1], "policy": k[2], **aggregate(v)}
                    for k, v in by_key.items()
                ],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
