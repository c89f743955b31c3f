"""Where a replay built from samples loses fidelity: one part of the replay at a time.

For each (suite, load, slice): the protocol's slice (``backend.sim.protocol``) runs on the
suite's pool with ``--policy``, recording what an EPP would post; the replay is built from those
samples alone (``build_workload``). Then the same policy runs, with the replay's own seed (the
original's + 1000), on:

* ``original``: the original requests themselves, on the true pod (the seed-to-seed noise
  floor: no replay error at all);
* ``replay``: the replay on the true pod (the reconstruction's error, no calibration);
* ``replay, prefix donors: recent``: cached blocks chained to the most recent request long
  enough (the replay's rule before), not to one that was itself a hit;
* ``replay +true arrivals`` / ``+true outputs`` / ``+true prefixes``: the replay with one part
  put back from the original run (matched by request), on the true pod;
* ``replay, no step noise``: the true pod without its per-iteration noise;
* ``replay, calibrated``: the pod the samples calibrate to: one factor by the coarse search
  alone (``coarse``, the calibration before), with the fine search (``joint``), or prefill and
  decode apart (``split``, the default), with its per-target error;
* ``replay, pods seen``: the replay on the number of pods the samples name (when fewer than the
  pool's).

Each row: SLO attainment and the gap to the original run, in points. Prints JSON lines, then the
whole result. Reduced scale: say so when quoting it.

    nice -n 15 .venv/bin/python bench/replay_ablation.py --suites mooncake:1.0 --requests 1000
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import numpy as np
from _common import machine

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.fromsamples import (
    REFINE_STEPS,
    PodModel,
    Workload,
    build_workload,
    calibrate,
    record,
    rows_from_observations,
)
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.replay import Observation
from backend.sim.report import summarize
from backend.sim.routers import make_policy
from backend.sim.traces.loader import Trace
from backend.sim.view import Slo

REPLAY_SEED_OFFSET = 1000


def run(
    trace: Trace,
    pods: int,
    pod: PodModel,
    policy: str,
    slo: Slo,
    seed: int,
    *,
    step_noise: bool = True,
    spread_ties: bool = False,
) -> SimResult:
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pod.profile).kv_bytes_per_token)
    options: dict[str, Any] = {"spread_ties": spread_ties}
    if not step_noise:
        options["step_noise"] = 0.0
    config = SimConfig(
        slo,
        seed=seed,
        transfer=fabric,
        prefill_scale=pod.prefill_scale,
        decode_scale=pod.decode_scale,
        **options,
    )
    return Simulation(
        trace, build_pool(pods, pod.profile), make_policy(policy, fabric, seed), config
    ).run()


def replay_rids(observations: list[Observation], workload: Workload) -> np.ndarray:
    """The original request behind each replayed one: ``build_workload`` sorts the TTFT rows by
    time (stably), then by reconstructed arrival; the same on the observations (the bench knows
    their request ids; the wire does not)."""
    ttft = sorted((o for o in observations if o.target == "ttft"), key=lambda o: o.time_s)
    arrival = np.array([o.time_s - o.label_ms / 1000.0 for o in ttft])
    order = np.argsort(arrival, kind="stable")
    rids = np.array([ttft[i].rid for i in order], np.int64)
    assert len(rids) == len(workload.trace)
    return rids


def mixed(
    replay: Trace,
    original: Trace,
    result: SimResult,
    rids: np.ndarray,
    *,
    arrivals_: bool = False,
    outputs: bool = False,
    prefixes: bool = False,
) -> Trace:
    """The replay with the chosen parts taken from the original run, request by request."""
    out = replay
    if arrivals_:
        a = result.arrival[rids]
        out = dataclasses.replace(out, arrival_s=np.maximum.accumulate(a - a.min()))
    if outputs:
        out = dataclasses.replace(out, output_tokens=original.output_tokens[rids].copy())
    if prefixes:
        units = original.all_units()
        blocks = [units[r] for r in rids]
        offsets = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
        out = dataclasses.replace(
            out,
            hash_ids=np.array([h for b in blocks for h in b], np.int64),
            hash_offsets=offsets,
            input_tokens=original.input_tokens[rids].copy(),
        )
    return out


def attainment(result: SimResult, slo: Slo) -> float:
    return float(summarize(result, slo)["slo_attainment"] or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="mooncake:1.0,azure:4.0", help="suite:load,...")
    ap.add_argument("--requests", type=int, default=1000, help="requests per slice")
    ap.add_argument("--slices", default="0", help="slice indices (0: the tuning slice)")
    ap.add_argument("--policy", default="least-request")
    ap.add_argument("--steps", type=int, default=4, help="calibration search steps")
    ap.add_argument("--no-calibration", action="store_true")
    args = ap.parse_args()
    out: dict[str, Any] = {
        "machine": machine(),
        "policy": args.policy,
        "scale": f"reduced: {args.requests} requests per slice",
        "runs": [],
    }
    for item in args.suites.split(","):
        name, _, load_text = item.partition(":")
        suite = dataclasses.replace(SUITES[name], slice_requests=args.requests)
        load = float(load_text)
        slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
        true_pod = PodModel(suite.gpu)
        for index in (int(s) for s in args.slices.split(",")):
            t0 = time.process_time()
            seed = index - 1 if index > 0 else 0  # the protocol's: slice i runs seed i - 1
            trace = arrivals(Job(suite, index, args.requests, load, "", (), seed, ()))
            truth_run, observations = record(trace, suite.pods, suite.gpu, args.policy, slo, seed)
            truth = attainment(truth_run, slo)
            workload = build_workload(rows_from_observations(observations), seed=seed + 1)
            rids = replay_rids(observations, workload)
            other = seed + REPLAY_SEED_OFFSET
            rows: dict[str, float] = {}

            def row(
                label: str,
                result: SimResult,
                rows: dict[str, float] = rows,
                slo: Slo = slo,
                truth: float = truth,
            ) -> None:
                rows[label] = round(100 * (attainment(result, slo) - truth), 2)

            pods = suite.pods
            row("original", run(trace, pods, true_pod, args.policy, slo, other, spread_ties=True))
            replay = workload.trace
            row("replay", run(replay, pods, true_pod, args.policy, slo, other))
            recent = build_workload(
                rows_from_observations(observations), seed=seed + 1, donors="recent"
            ).trace
            row(
                "replay, prefix donors: recent",
                run(recent, pods, true_pod, args.policy, slo, other),
            )
            row(
                "replay, no step noise",
                run(replay, pods, true_pod, args.policy, slo, other, step_noise=False),
            )
            for part in ("arrivals_", "outputs", "prefixes"):
                t = mixed(replay, trace, truth_run, rids, **{part: True})
                row(
                    f"replay +true {part.rstrip('_')}",
                    run(t, pods, true_pod, args.policy, slo, other),
                )
            t = mixed(replay, trace, truth_run, rids, arrivals_=True, outputs=True, prefixes=True)
            row("replay +all three true", run(t, pods, true_pod, args.policy, slo, other))
            if len(workload.pods) != pods:
                row(
                    "replay, pods seen",
                    run(replay, len(workload.pods), true_pod, args.policy, slo, other),
                )
            calibrations: dict[str, Any] = {}
            if not args.no_calibration:
                # "coarse": the calibration before (one factor, the coarse search only).
                for mode, refine in (
                    ("coarse", 0),
                    ("joint", REFINE_STEPS),
                    ("split", REFINE_STEPS),
                ):
                    cal = calibrate(
                        workload,
                        args.policy,
                        slo,
                        steps=args.steps,
                        seed=other,
                        mode="split" if mode == "split" else "joint",
                        refine_steps=refine,
                    )
                    calibrations[mode] = cal.summary()
                    row(
                        f"replay, calibrated ({mode})",
                        run(replay, pods, cal.pod, args.policy, slo, other),
                    )
            record_ = {
                "suite": name,
                "load": load,
                "slice": index,
                "seed": seed,
                "requests": len(trace),
                "original_attainment": round(100 * truth, 2),
                "gap_points": rows,
                "calibration": calibrations,
                "outputs_drawn": workload.drawn_outputs,
                "pods_seen": len(workload.pods),
                "arrival_error_ms_max": round(
                    float(
                        np.max(
                            np.abs(
                                (truth_run.arrival[rids] - truth_run.arrival[rids].min())
                                - replay.arrival_s
                            )
                        )
                    )
                    * 1000,
                    3,
                ),
                "output_exact_share": round(
                    float(np.mean(trace.output_tokens[rids] == replay.output_tokens)), 4
                ),
                "cpu_s": round(time.process_time() - t0, 1),
            }
            out["runs"].append(record_)
            print(json.dumps(record_), flush=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
