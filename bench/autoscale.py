"""Autoscaling in the simulator: the scalers on the same traffic, pods and bounds. JSON.

    .venv/bin/python bench/autoscale.py [--trace mooncake-conversation] [--seeds 0,1,2]
        [--scalers queue-hpa,wva-saturation,headroom-saturation,headroom-desired]
        (also headroom-saturation-gauge, headroom-combined, foresight@pods_per_ktok=X)
        (a baseline's knobs: queue-hpa@target=3, wva-saturation@kv_threshold=0.7/queue_spare=2)
        [--shapes ramp,step] [--base 0.2] [--peak 0.6] [--up-s 1200 | --short] [--step-s 600]
        [--burst 0.6] [--min-pods 2] [--max-pods 12] [--initial 3] [--warmup-s 240]
        [--startup-s 90] [--desired-target 0.95] [--desired-lookback-s 120]
        [--desired-plateau 0.01] [--desired-rate-window-s 0] [--desired-score-last-s 0]
        [--desired-interval-s 30]
        [--saturation present|mix] [--ttft-ms 2000] [--tpot-ms 100]
        [--mix-weight 0.6]

Two traffic shapes (``backend/sim/autoscale.py``), each after ``--warmup-s`` at ``--base`` x the
trace's rate in which the scalers settle from ``--initial`` pods (not counted): the issue's ramp
(the trace time-warped from ``--base`` x its own rate up to ``--peak`` x over ``--up-s``, 20
minutes, and back down over as long: 3x from trough to peak; ``--short`` for the reduced 5
minutes each way) and a step (``--burst`` x from a third of ``--step-s`` for a third of it).
The defaults size the pool so that the peak needs about 9 of the 12 pods allowed (4
``a100-llama3-8b`` pods saturate Mooncake at about 0.27x its rate). Every scaler runs the same
router (Headroom's policy, trained online), the same pod start-up delay, the same min and max
pods and the same HPA scale-down stabilisation (300 s). ``headroom-desired`` is the service's
desired-replicas computation on the samples the simulated EPP posted (``--desired-*``: its
target, lookback and plateau). Reported per scaler and shape: SLO attainment (TTFT <= 2 s and
TPOT <= 100 ms), GPU-hours (pods starting, ready or draining, up to the last arrival), and for
the step the time from the burst until a minute of arrivals meets the SLOs at the level of the
two minutes before it (less 5 points); mean and min-max over the seeds. ``headroom-saturation``
reads the pods' level as they stand, or with ``--saturation mix`` the service's default level
(``--mix-weight`` of it and the next interval's, the last minute's arrivals replayed).
``headroom-saturation-gauge`` is the same count as the service exports it
(``headroom_saturation_replicas``: from the ready pods, no hold while pods start) and
``headroom-combined`` the larger of it and ``headroom-desired``, as a KEDA ScaledObject with
both triggers scales. ``foresight@pods_per_ktok=X`` (``lead_s``, ``window_s`` too) is not a
scaler but a reference that reads the warped trace's future (``Foresight``): swept over ``X``
it traces what following the coming load exactly buys at each cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.types import TransferConfig
from backend.settings import CapacitySettings
from backend.sim.autoscale import (
    ROLES,
    TREND_S,
    AutoscaleResult,
    Combined,
    DesiredReplicas,
    Fixed,
    Fleet,
    Foresight,
    PredictedSaturation,
    QueueHpa,
    Scaler,
    WvaSaturation,
    ramp,
    run_autoscaled,
    step,
    warp,
)
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import OURS, make_policy
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces import TenantModel, Trace, load_trace
from backend.sim.view import Slo
from bench._common import machine, mean_min_max


def slo(args: argparse.Namespace) -> Slo:
    """The pool's SLOs (``--ttft-ms``, ``--tpot-ms``; Mooncake's suite's by default)."""
    return Slo(args.ttft_ms, args.tpot_ms)


SCALERS = ("queue-hpa", "wva-saturation", "headroom-saturation", "headroom-desired")
"""The default run; ``headroom-saturation-gauge`` and ``headroom-combined`` on request."""
MORE_SCALERS = ("headroom-saturation-gauge", "headroom-combined")


def desired_options(args: argparse.Namespace) -> dict[str, Any]:
    """``DesiredReplicas``' options from the ``--desired-*`` and pod-bound arguments."""
    return {
        "target": args.desired_target,
        "lookback_s": args.desired_lookback_s,
        "plateau": args.desired_plateau,
        "min_pods": args.min_pods,
        "max_pods": args.max_pods,
        "rate_window_s": args.desired_rate_window_s or None,
        # A rate window replaces the look-ahead, as in the service.
        "lead_s": None if args.desired_rate_window_s else (args.desired_lead_s or None),
        "score_last_s": args.desired_score_last_s or None,
        "every_s": args.desired_interval_s,
        "also_replay_s": args.desired_also_replay_s or None,
    }


# A baseline's knobs on the command line: ``queue-hpa@target=3`` or
# ``wva-saturation@kv_threshold=0.7/kv_spare=0.2/queue_threshold=3/queue_spare=2`` (WVA's
# capacity-scaling ConfigMap: kvCacheThreshold, kvSpareTrigger, queueLengthThreshold,
# queueSpareTrigger), so a baseline's whole frontier runs in one command.
KNOBS = {
    "queue-hpa": ("target",),
    "wva-saturation": ("kv_threshold", "kv_spare", "queue_threshold", "queue_spare"),
    "foresight": ("pods_per_ktok", "lead_s", "window_s"),
}


def knobs(name: str) -> tuple[str, dict[str, float]]:
    """``base@k=v/...`` -> (base, {k: v}), each ``k`` one of the base scaler's knobs (``/``, as
    ``--scalers`` splits on commas)."""
    base, _, spec = name.partition("@")
    values: dict[str, float] = {}
    for item in filter(None, spec.split("/")):
        key, sep, value = item.partition("=")
        if not sep or key not in KNOBS.get(base, ()):
            allowed = ", ".join(KNOBS.get(base, ())) or "none"
            raise SystemExit(f"{name!r}: {item!r} is not a knob of {base} (knobs: {allowed})")
        try:
            values[key] = float(value)
        except ValueError:
            raise SystemExit(f"{name!r}: {key} must be a number, not {value!r}") from None
    return base, values


def _scaler(name: str, args: argparse.Namespace, trace: Trace | None = None) -> Scaler:
    """The scaler ``name`` names; ``trace`` is the run's traffic, which only ``foresight``
    reads (and needs)."""
    if name.startswith("fixed-"):
        return Fixed(int(name.removeprefix("fixed-")), name=name)  # the unscaled reference
    base, values = knobs(name)
    if base == "queue-hpa":
        return QueueHpa(**{"target": args.queue_target, **values}, name=name)
    if base == "wva-saturation":
        return WvaSaturation(**values, name=name)
    if base == "foresight":
        if "pods_per_ktok" not in values:
            raise SystemExit(f"{name!r}: foresight needs pods_per_ktok=X")
        if trace is None:
            raise SystemExit("foresight reads the run's trace: build it with the run")
        return Foresight(trace.arrival_s, trace.input_tokens, **values, name=name)
    if name == "headroom-saturation":
        return PredictedSaturation(budget=1.0 - args.attainment)
    if name == "headroom-desired":
        return DesiredReplicas(slo(args), **desired_options(args))
    if name == "headroom-saturation-gauge":
        # As the service's gauge computes it: from the ready pods, with no hold while pods start.
        return PredictedSaturation(
            budget=1.0 - args.attainment, hold_while_starting=False, name=name
        )
    if name == "headroom-combined":
        # KEDA's two triggers (deploy/kubernetes/keda-scaledobject.yaml): the larger answer.
        return Combined(
            (
                DesiredReplicas(slo(args), **desired_options(args)),
                _scaler("headroom-saturation-gauge", args),
            )
        )
    known = ", ".join(SCALERS + MORE_SCALERS)
    raise SystemExit(f"unknown scaler {name!r}; choose from {known}, foresight@... or fixed-N")


def _role_scalers(name: str, args: argparse.Namespace) -> dict[str, Scaler]:
    """A P/D pool's scaler ``name`` as one per role's Deployment: a baseline's own instance on
    each role's pods; Headroom's desired replicas one estimate whose split both roles read
    (the service's ``headroom_desired_role_replicas``); its saturation count each role's
    (``headroom_saturation_role_replicas``)."""
    if name.startswith("foresight"):
        raise SystemExit("foresight counts pods by prompt tokens, not per role: not with --pd")
    if name in ("headroom-desired", "headroom-combined"):
        desired = DesiredReplicas(slo(args), **desired_options(args))
        if name == "headroom-desired":
            return {role: desired.role(role) for role in ROLES}
        return {
            role: Combined(
                (desired.role(role), _scaler("headroom-saturation-gauge", args)), name=name
            )
            for role in ROLES
        }
    return {role: _scaler(name, args) for role in ROLES}


def burst_at(args: argparse.Namespace) -> float:
    """When the step's burst starts."""
    return float(args.warmup_s + args.step_s / 3)


def one_run(
    args: argparse.Namespace, shape: str, scaler: Scaler | str, seed: int
) -> AutoscaleResult:
    """One scaler (or the name of one, built on this run's trace) on one seed of one traffic
    shape (``ramp`` or ``step``)."""
    slots = 2 * args.max_pods  # draining pods keep their slot while new ones start
    pods = build_pool(
        2 * slots if args.pd else slots, args.gpu, f"{slots}:{slots}" if args.pd else None
    )
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pods[0].profile).kv_bytes_per_token)
    warm = args.warmup_s
    horizon = warm + (2 * args.up_s if shape == "ramp" else args.step_s)
    rate = (
        ramp(args.base, args.peak, args.up_s, warm)
        if shape == "ramp"
        else step(args.base, args.burst, burst_at(args), args.step_s / 3)
    )
    tenants = TenantModel(seed=seed) if args.trace.startswith("azure") else None
    trace = warp(load_trace(args.trace, tenants).spread_ties(seed), rate, horizon)
    router = make_policy(OURS, fabric, seed)
    assert isinstance(router, PredictedLatency)
    if args.pd:
        # One fleet per role's Deployment, over the pool's pods of that role, each within
        # --min-pods and --max-pods from the split's count.
        initial = dict(zip(ROLES, (int(n) for n in args.pd.split(":")), strict=True))
        fleets: Fleet | dict[str, Fleet] = {
            role: Fleet(
                slots,
                args.min_pods,
                args.max_pods,
                args.startup_s,
                initial[role],
                indices=tuple(i for i, p in enumerate(pods) if p.role == role),
            )
            for role in ROLES
        }
        scalers: Scaler | dict[str, Scaler] = (
            _role_scalers(scaler, args) if isinstance(scaler, str) else scaler
        )
    else:
        scalers = _scaler(scaler, args, trace) if isinstance(scaler, str) else scaler
        fleets = Fleet(slots, args.min_pods, args.max_pods, args.startup_s, args.initial)
    return run_autoscaled(
        trace,
        pods,
        router,
        scalers,
        fleets,
        slo(args),
        seed,
        measure_from_s=warm,
        present_weight=None if args.saturation == "present" else args.mix_weight,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, Any] = {}
    for shape in args.shapes.split(","):
        per_scaler: dict[str, Any] = {}
        for name in args.scalers.split(","):
            runs: list[dict[str, Any]] = []
            for seed in seeds:
                started = time.process_time()
                result = one_run(args, shape, name, seed)
                recover = result.recovery_s(burst_at(args)) if shape == "step" else None
                runs.append(
                    {
                        "seed": seed,
                        "requests": result.requests,
                        "attainment": round(result.attainment, 4),
                        "gpu_hours": round(result.gpu_hours, 4),
                        "recovery_s": recover,
                        "peak_replicas": max(r for _, r, _, _ in result.timeline),
                        **(
                            {
                                "peak_role_replicas": {
                                    role: max(r for _, r, _ in periods)
                                    for role, periods in result.by_role.items()
                                }
                            }
                            if result.by_role
                            else {}
                        ),
                        "cpu_s": round(time.process_time() - started, 1),
                    }
                )
                print(f"{shape} {name} seed {seed}: {runs[-1]}", file=sys.stderr, flush=True)
            summary: dict[str, Any] = {
                "attainment": mean_min_max([r["attainment"] for r in runs]),
                "gpu_hours": mean_min_max([r["gpu_hours"] for r in runs]),
                "runs": runs,
            }
            if shape == "step":
                recovered = [r["recovery_s"] for r in runs if r["recovery_s"] is not None]
                summary["recovery_s"] = mean_min_max(recovered) if recovered else None
                summary["never_recovered"] = len(runs) - len(recovered)
            per_scaler[name] = summary
        out[shape] = per_scaler
    return out


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """This benchmark's options (``argv``: None reads the command line)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="mooncake-conversation")
    parser.add_argument("--gpu", default="a100-llama3-8b")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--scalers", default=",".join(SCALERS))
    parser.add_argument("--shapes", default="ramp,step")
    parser.add_argument("--base", type=float, default=0.2)
    parser.add_argument("--peak", type=float, default=0.6)
    parser.add_argument("--burst", type=float, default=0.6)
    parser.add_argument("--up-s", type=float, default=1200.0)
    parser.add_argument(
        "--short", action="store_true", help="the reduced ramp: 5 minutes up and 5 down"
    )
    parser.add_argument("--step-s", type=float, default=600.0)
    parser.add_argument("--min-pods", type=int, default=2)
    parser.add_argument("--max-pods", type=int, default=12)
    parser.add_argument("--initial", type=int, default=3)
    parser.add_argument(
        "--pd",
        default=None,
        help="a P/D pool starting at this split, e.g. 2:2: each role its own Deployment, "
        "scaled by its own scaler within --min-pods and --max-pods (GPU-hours count both)",
    )
    parser.add_argument("--warmup-s", type=float, default=240.0)
    parser.add_argument("--startup-s", type=float, default=90.0)
    parser.add_argument("--queue-target", type=float, default=5.0)
    parser.add_argument("--ttft-ms", type=float, default=2000.0, help="the TTFT SLO")
    parser.add_argument("--tpot-ms", type=float, default=100.0, help="the TPOT SLO")
    parser.add_argument("--attainment", type=float, default=0.95)
    parser.add_argument("--desired-target", type=float, default=0.95)
    parser.add_argument("--desired-lookback-s", type=float, default=120.0)
    parser.add_argument("--desired-plateau", type=float, default=0.01)
    parser.add_argument(
        "--desired-rate-window-s",
        type=float,
        default=0.0,
        help="replay the lookback at the rate of its last this many seconds (0: its mean rate)",
    )
    parser.add_argument(
        "--desired-lead-s",
        type=float,
        default=CapacitySettings().desired_lead_s,
        help="replay the lookback at the rate forecast this many seconds ahead, the pods' "
        "start-up (the service's HEADROOM_CAPACITY__DESIRED_LEAD_S, 90 s; 0: its mean rate; "
        "--desired-rate-window-s replaces it)",
    )
    parser.add_argument(
        "--desired-interval-s",
        type=float,
        default=30.0,
        help="how often the desired-replicas job runs "
        "(the service's HEADROOM_CAPACITY__DESIRED_INTERVAL_S, 30 s by default)",
    )
    parser.add_argument(
        "--desired-also-replay-s",
        type=float,
        default=0.0,
        help="also replay the lookback's newest this many seconds and answer the larger count "
        "(0: one replay)",
    )
    parser.add_argument(
        "--desired-score-last-s",
        type=float,
        default=0.0,
        help="score each replay on its last this many seconds' requests (0: on all of them)",
    )
    parser.add_argument(
        "--saturation",
        choices=("present", "mix"),
        default="present",
        help="the level headroom-saturation reads: the pods as they stand (the tables' runs) "
        "or the service's mix with the next interval",
    )
    parser.add_argument(
        "--mix-weight",
        type=float,
        default=CapacitySettings().present_weight,
        help="the mix's weight on the present level (the service's default)",
    )
    args = parser.parse_args(argv)
    if args.short:
        args.up_s = 300.0
    if unknown := set(args.shapes.split(",")) - {"ramp", "step"}:
        parser.error(f"unknown shape(s) {', '.join(sorted(unknown))}; choose ramp, step")
    return args


def main() -> None:
    args = arguments()
    started = time.time()
    results = run(args)
    print(
        json.dumps(
            {
                "machine": machine(),
                "config": {
                    **vars(args),
                    "slo": {"ttft_ms": args.ttft_ms, "tpot_ms": args.tpot_ms},
                    "router": OURS,
                    "scale_down_stabilisation_s": 300.0,
                    "period_s": 15.0,
                    "recovered": "60 s of arrivals back within 5 points of the 120 s before",
                    "reduced_scale": args.up_s < 1200,
                    "desired": {
                        "target": args.desired_target,
                        "lookback_s": args.desired_lookback_s,
                        "plateau": args.desired_plateau,
                        "rate_window_s": args.desired_rate_window_s,
                        "lead_s": desired_options(args)["lead_s"] or 0.0,
                        "trend_s": TREND_S,
                        "score_last_s": args.desired_score_last_s,
                        "router": "llm-d-322",
                        "every_s": 30.0,
                    },
                },
                "results": results,
                "wall_s": round(time.time() - started, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
