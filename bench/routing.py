"""Routing benchmark: every policy replaying real traces in the simulator. Prints JSON.

    .venv/bin/python bench/routing.py --protocol mooncake|azure|pd|hetero [--requests N]
        [--seeds 0,1,2] [--loads ...] [--policies ...] [--workers 2] [--capacity-steps 3]
        [--capacity-target 0.9] [--load-basis trace|slice] [--no-tune] [--step-cost-scale X]
        [--sim KEY=JSON ...] [--render FILE] [--cache DIR | --no-cache]
        [--out bench-results/protocol]
    .venv/bin/python bench/routing.py [--suite mooncake|azure|pd|hetero|speed|all] [--quick]
                                      [--img docs/img] [--out bench-results/routing]

``--protocol`` runs the fair protocol of ``backend/sim/protocol.py`` end to end: every policy's
options tuned on the tuning slice, figures from disjoint evaluation slices, one per seed, as
mean and min-max, the SLO capacity by bisection on load; it prints the tables and writes
``<suite>_protocol.json``. ``--step-cost-scale`` and ``--sim`` pass simulator options through
(``SimConfig`` fields; an option this simulator lacks is refused by name). Every simulation's
result is kept in ``OUT/runs`` (``--cache``) and reused by any later run that needs the same
simulation with the same code: a stopped run resumes, and a rerun with more capacity steps or a
subset of policies repeats nothing already done.

The ``--suite`` runs below are single-seed sweeps over whole traces (plots, the options table).

Suites (each a ``BenchConfig``; ``docs/benchmarks.md`` shows their tables and plots):

* ``mooncake``: the Mooncake conversation trace (12,031 requests, real prefix hashes) on 8 x
  A100 Llama-3-8B, loads 0.5 to 1.15 x its rate, SLO 2 s TTFT / 100 ms TPOT, every policy;
* ``azure``: the Azure 2023 code trace (synthetic per-tenant system prompts) on the same pool,
  loads 1 to 5 x, SLO 1 s / 100 ms;
* ``pd``: Mooncake on 4 prefill + 4 decode pods in 2 regions of 2 racks: greedy against joint
  P/D pair selection;
* ``hetero``: the Azure code trace on 4 x A100 + 4 x H100 (Llama-2-7B, 4k context);
* ``options``: the choices behind Headroom's policy (strategy, picker, prefix source, TTFT
  weight), each varied alone from it, on the first 3,000 Mooncake requests near saturation;
* ``speed``: Headroom's policy over the full Mooncake trace at 1 x, wall and CPU seconds; run it
  as ``taskset -c 0 .venv/bin/python bench/routing.py --suite speed`` to hold the whole process
  (numpy's threads included) to one core; without taskset only the main thread is pinned.

Wall-clock figures depend on the machine (stated in the output); the simulated latencies do not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.types import TransferConfig
from backend.sim.bench import BenchConfig, run_bench, slim, write_outputs
from backend.sim.engine import SimConfig, Simulation
from backend.sim.pool import build_pool
from backend.sim.report import summarize
from backend.sim.routers import MAIN_POLICIES, OURS, OURS_GREEDY_PD, ours_config
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces import load_trace
from backend.sim.view import Slo

SUITES: dict[str, BenchConfig] = {
    "mooncake": BenchConfig(
        trace="mooncake-conversation",
        pods=8,
        gpu="a100-llama3-8b",
        loads=(0.5, 0.75, 1.0, 1.15),
        policies=MAIN_POLICIES,
        ttft_slo_ms=2000.0,
        tpot_slo_ms=100.0,
    ),
    "azure": BenchConfig(
        trace="azure-code",
        pods=8,
        gpu="a100-llama3-8b",
        loads=(1.0, 2.0, 3.0, 4.0, 5.0),
        policies=MAIN_POLICIES,
        ttft_slo_ms=1000.0,
        tpot_slo_ms=100.0,
    ),
    "pd": BenchConfig(
        trace="mooncake-conversation",
        pods=8,
        gpu="a100-llama3-8b",
        pd="4:4",
        layout="regions:2,racks:2",
        loads=(0.3, 0.5),
        policies=(
            "round-robin",
            "least-request",
            "dynamo-kv",
            "llm-d-predicted",
            OURS_GREEDY_PD,
            OURS,
            "lookahead-ref",
        ),
        ttft_slo_ms=2000.0,
        tpot_slo_ms=100.0,
    ),
    "hetero": BenchConfig(
        trace="azure-code",
        pods=8,
        gpu="a100-llama2-7b:4,h100-llama2-7b:4",
        loads=(4.0, 8.0, 12.0, 16.0),
        policies=MAIN_POLICIES,
        ttft_slo_ms=1000.0,
        tpot_slo_ms=100.0,
        max_model_len=4096,
    ),
}


# Each variant changes one choice of Headroom's policy (ours_config) back to an alternative.
OPTION_VARIANTS: dict[str, dict[str, Any]] = {
    "headroom (best fit, most, KV-event prefix, ttft weight 0.8)": {},
    "strategy least (upstream's default)": {"policy": {"strategy": "least"}},
    "weighted-random picker (upstream's)": {"policy": {"picker": "weighted_random"}},
    "approximate prefix index (upstream's)": {"prefix": "approx"},
    "ttft weight 1.0": {"policy": {"ttft_weight": 1.0}},
    "upstream XGBoost predictor": {"kind": "xgboost"},
}


def options(quick: bool) -> dict[str, Any]:
    """Headroom's choices, each undone alone, on a Mooncake slice around saturation."""
    n, loads = (1500, (1.0,)) if quick else (3000, (1.0, 1.15))
    trace = load_trace("mooncake-conversation").head(n)
    pool = build_pool(8, "a100-llama3-8b")
    fabric = TransferConfig()
    slo = Slo(2000.0, 100.0)
    base = ours_config(fabric)
    rows = []
    for load in loads:
        for label, change in OPTION_VARIANTS.items():
            policy = dataclasses.replace(base.policy, **change.get("policy", {}))
            rest = {k: v for k, v in change.items() if k != "policy"}
            if rest.get("kind") == "xgboost":
                from backend.predictor.regressors import TrainParams

                rest["params"] = TrainParams.upstream()
            config = dataclasses.replace(base, policy=policy, **rest)
            sim = Simulation(
                trace.scaled(load),
                pool,
                PredictedLatency(label, label, config),
                SimConfig(slo, transfer=fabric),
            )
            r = summarize(sim.run(), slo)
            row = {
                "load": load,
                "variant": label,
                "slo_attainment": r["slo_attainment"],
                "ttft_ms": r["ttft_ms"],
                "tpot_ms": r["tpot_ms"],
                "e2e_ms": r["e2e_ms"],
                "prefix_hit_rate": r["prefix_hit_rate"],
                "predictor_live_mape": r["predictor_live_mape"],
            }
            print(
                f"[options] load {load:g} {label}: SLO met {row['slo_attainment']}", file=sys.stderr
            )
            rows.append(row)
    return {
        "trace": f"mooncake-conversation, first {n} requests",
        "pool": "8 x a100-llama3-8b",
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "results": rows,
    }


def speed() -> dict[str, Any]:
    """One policy over the full Mooncake trace on 8 pods, on one core, training included."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    config = BenchConfig(loads=(1.0,), policies=(OURS,))
    wall, cpu = time.perf_counter(), time.process_time()
    data = run_bench(config)
    row = data["results"][0]
    return {
        "what": "headroom policy, full mooncake-conversation (12,031 requests), 8 pods, load 1, "
        "one core",
        "wall_s": round(time.perf_counter() - wall, 1),
        "cpu_s": round(time.process_time() - cpu, 1),
        "simulation_wall_s": row["wall_s"],
        "events": row["events"],
        "fits": row["policy_detail"]["predictor"]["fits"],
        "fit_seconds_total": row["policy_detail"]["predictor"]["fit_seconds_total"],
        "decisions": row["policy_detail"]["decisions"],
        "target_s": 60,
    }


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def _sim_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--sim takes KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def protocol(args: argparse.Namespace) -> int:
    from backend.sim.protocol import STEP_COST_SCALES, ProtocolConfig, run_protocol, table
    from backend.sim.protocol import SUITES as PROTOCOL_SUITES

    sim = dict(args.sim or [])
    if args.step_cost_scale is not None:
        sim.update(dict.fromkeys(STEP_COST_SCALES, args.step_cost_scale))
    try:
        config = ProtocolConfig(
            PROTOCOL_SUITES[args.protocol],
            seeds=tuple(int(x) for x in args.seeds.split(",")),
            slice_requests=args.requests,
            loads=_floats(args.loads) if args.loads else None,
            policies=tuple(args.policies.split(",")) if args.policies else None,
            tune=not args.no_tune,
            capacity_steps=args.capacity_steps,
            capacity_target=args.capacity_target,
            workers=args.workers,
            sim=sim,
            load_basis=args.load_basis,
            cache=None if args.no_cache else (args.cache or args.out / "runs"),
        )
        args.out.mkdir(parents=True, exist_ok=True)
        partial = args.out / f"{args.protocol}_protocol.partial.json"

        def checkpoint(data: dict[str, Any]) -> None:
            partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            print(f"evaluation done, wrote {partial}", file=sys.stderr, flush=True)

        data = run_protocol(config, checkpoint=checkpoint)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = args.out / f"{args.protocol}_protocol.json"
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(table(data))
    print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=["mooncake", "azure", "pd", "hetero"], default=None)
    parser.add_argument("--requests", type=int, default=None, help="requests per slice")
    parser.add_argument("--seeds", default="0,1,2", help="one evaluation slice per seed")
    parser.add_argument("--loads", default=None, help="comma-separated evaluation loads")
    parser.add_argument("--policies", default=None, help="comma-separated policy names")
    parser.add_argument("--workers", type=int, default=2, help="parallel simulation processes")
    parser.add_argument("--capacity-steps", type=int, default=3, help="bisection steps")
    parser.add_argument("--capacity-target", type=float, default=None)
    parser.add_argument(
        "--load-basis",
        choices=["trace", "slice"],
        default="trace",
        help="load 1 = the whole trace's mean rate (default) or each slice's own",
    )
    parser.add_argument("--no-tune", action="store_true", help="every policy at its defaults")
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="keep and reuse every simulation's result here (default: OUT/runs)",
    )
    parser.add_argument("--no-cache", action="store_true", help="rerun every simulation")
    parser.add_argument("--step-cost-scale", type=float, default=None)
    parser.add_argument("--sim", type=_sim_option, action="append", help="KEY=VALUE")
    parser.add_argument("--render", type=Path, default=None, help="print a protocol JSON's tables")
    parser.add_argument("--suite", default="all", choices=[*SUITES, "options", "speed", "all"])
    parser.add_argument("--quick", action="store_true", help="first 1,500 requests, two loads")
    parser.add_argument("--img", type=Path, default=None, help="write the PNG plots here")
    parser.add_argument("--out", type=Path, default=Path("bench-results/routing"))
    args = parser.parse_args(argv)
    if args.render is not None:
        from backend.sim.protocol import refresh, table

        print(table(refresh(json.loads(args.render.read_text(encoding="utf-8")))))
        return 0
    if args.protocol is not None:
        if args.out == Path("bench-results/routing"):
            args.out = Path("bench-results/protocol")
        return protocol(args)
    names = [*SUITES, "options", "speed"] if args.suite == "all" else [args.suite]
    report: dict[str, Any] = {"benchmark": "routing"}
    for name in names:
        if name == "speed":
            report["speed"] = speed()
            continue
        if name == "options":
            report["options"] = options(args.quick)
            continue
        config = SUITES[name]
        if args.quick:
            config = dataclasses.replace(config, limit=1500, loads=config.loads[:2])

        def show(row: dict[str, Any], suite: str = name) -> None:
            print(
                f"[{suite}] load {row['load']:g} {row['policy']}: SLO met "
                f"{row['slo_attainment']}, TTFT p50 {row['ttft_ms']['p50']} ms, "
                f"wall {row['wall_s']} s",
                file=sys.stderr,
                flush=True,
            )

        data = run_bench(config, on_result=show)
        write_outputs(data, args.out, prefix=f"{name}_")
        if args.img is not None:
            from backend.sim.report import write_plots

            args.img.mkdir(parents=True, exist_ok=True)
            write_plots(data, args.img, prefix=f"sim_{name}_")
        report[name] = slim(data)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
