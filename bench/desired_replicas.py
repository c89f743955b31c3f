"""Desired replicas' cost: one run of the worker's computation for an 8-pod pool.

Simulates ``--lookback`` seconds of a trace on ``--pods`` pods and keeps the samples an llm-d
EPP would post (``backend.sim.replay.Recorder``), then times what the periodic job does with a
pool's samples (``backend.capacity.desired.estimate``: rebuild the requests, calibrate the pod
over the shipped profiles, or with ``--declared`` over ``--gpu`` alone, as for a policy that
names its ``gpu_profile``, bisect on the pod count) in CPU seconds of this one process.
Target: within 60 s of one core. Prints JSON.

With ``--wire`` the estimate reads the samples as ``bench/replay_fidelity.py`` builds them
(``stored``: as the service stores them; ``unpaired``: as the product read them before each
request's two samples were matched, every answer's length unknown). With ``--truth`` it also
bisects the window's true requests on the true pod (the same router, target, plateau and seed):
the count the estimate should find.

    .venv/bin/python bench/desired_replicas.py [--trace mooncake-conversation --load 0.5]
        [--start 0 --seed 0 --wire stored --truth]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from _common import machine
from replay_fidelity import WIRES, wire_rows

from backend.capacity.desired import estimate
from backend.settings import CapacitySettings
from backend.sim.fromsamples import PodModel, desired_replicas, record, simulate
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
    ap.add_argument("--start", type=float, default=0.0, help="the window's start in the trace, s")
    ap.add_argument("--seed", type=int, default=0, help="the recorded run's seed")
    ap.add_argument("--wire", choices=WIRES, default="stored")
    ap.add_argument("--truth", action="store_true", help="also bisect the true requests")
    ap.add_argument(
        "--pd",
        default=None,
        help="record on a P/D pool of this split of --pods, e.g. 4:4: the estimate then says "
        "how many prefill and decode pods (with --truth, the true requests' split and the "
        "estimate's split replayed on them)",
    )
    ap.add_argument(
        "--declared",
        action="store_true",
        help="calibrate only the pods' profile (--gpu), as for a policy naming its gpu_profile",
    )
    args = ap.parse_args()
    settings = CapacitySettings(desired_lookback_s=args.lookback)
    trace = load_trace(args.trace).scaled(args.load).window(args.start, args.start + args.lookback)
    router = settings.desired_router
    _, observations = record(trace, args.pods, args.gpu, router, DEFAULT_SLO, args.seed, pd=args.pd)
    rows = wire_rows(observations, args.wire)
    runs = []
    for _ in range(args.repeat):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        declared = (args.gpu,) if args.declared else None
        est = estimate(rows, DEFAULT_SLO, args.target, settings, profiles=declared)
        assert est is not None
        runs.append(
            {
                "cpu_s": round(time.process_time() - cpu0, 2),
                "wall_s": round(time.perf_counter() - wall0, 2),
                "replicas": est.replicas,
                "prefill_replicas": est.prefill_replicas,
                "met": est.met,
                "attainment": round(est.attainment, 4),
                "profile": est.profile,
                "scale": round(est.scale, 3),
                "calibration_error": round(est.calibration_error, 4),
                "simulations": est.simulations,
                "outputs_paired": est.workload.paired_outputs,
                "mean_output": round(float(est.workload.trace.output_tokens.mean()), 1),
            }
        )
    truth = None
    if args.truth:
        # The arrivals as the recorded run had them (tied stamps spread with its seed), at the
        # rate the estimate replayed (its forecast with the default lead).
        load = est.rate_rps / est.workload.rate_rps
        arrived = trace.spread_ties(args.seed)
        true_trace = arrived.scaled(load) if load != 1 else arrived
        true = desired_replicas(
            dataclasses.replace(est.workload, trace=true_trace),
            PodModel(args.gpu),
            router,
            DEFAULT_SLO,
            args.target,
            max_replicas=settings.desired_max_replicas,
        )
        truth = {
            "replicas": true.replicas,
            "prefill_replicas": true.prefill_replicas,
            "met": true.met,
            "attainment": round(true.attainment, 4),
            "load": round(load, 4),
        }
        if est.prefill_replicas is not None:

            def true_at(p: int, d: int) -> float:
                run = simulate(
                    true_trace, p + d, PodModel(args.gpu), router, DEFAULT_SLO, 0, None, p
                )
                return round(run.slo_attainment, 4)

            # What the estimate's split attains on the true requests and pod: whether the
            # pool scaled to it would meet the target.
            truth["at_estimate"] = true_at(
                est.prefill_replicas, est.replicas - est.prefill_replicas
            )
            # The coordinate search's answer against every split of every smaller total: the
            # fewest pods of any split that meet the target on the true requests.
            fewest = None
            for total in range(2, true.replicas + 1):
                met = [
                    (p, a) for p in range(1, total) if (a := true_at(p, total - p)) >= args.target
                ]
                if met:
                    fewest = {"replicas": total, "splits_meeting": [p for p, _ in met]}
                    break
            truth["fewest_any_split"] = fewest
    print(
        json.dumps(
            {
                "machine": machine(),
                "trace": args.trace,
                "load": args.load,
                "pods": args.pods,
                "pd": args.pd,
                "true_gpu": args.gpu,
                "declared": args.declared,
                "lookback_s": args.lookback,
                "samples": len(rows),
                "start_s": args.start,
                "seed": args.seed,
                "wire": args.wire,
                "true_mean_output": round(float(trace.output_tokens.mean()), 1),
                "truth": truth,
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
