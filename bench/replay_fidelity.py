"""Replay fidelity: does a replay built from a pool's samples alone reproduce the pool?

For each (suite, load) and each evaluation slice of the benchmark protocol
(``backend.sim.protocol``: slice ``i`` of ``--requests`` requests runs with seed ``i - 1``;
slice 0 is the tuning slice, where this check's design was chosen, so it is not reported by
default): run the slice on the suite's pool (8 pods of its GPU, its SLOs) with ``--policy``,
recording the samples an llm-d EPP would post (``backend.sim.replay.Recorder``); build the
replay from those samples alone (``backend.sim.fromsamples.build_workload``), calibrate the
simulated pod to them (``calibrate``: profile, then prefill and decode factors), replay the same
policy on it with the replay's own seed and compare SLO attainment with the original run's.
The calibration is chosen on the samples (as the service does), never on the original run's
attainment. Prints JSON lines per run and per (suite, load), then the whole result.

``--wire`` says which samples the replay is built from (each run also reports how well each
request's two samples were matched, which gives its answer's length: ``pairing``):

* ``stored`` (the default): what the service stores of an EPP's samples, Headroom's or
  upstream's (llm-d-router HEAD): a request's TTFT and TPOT samples share pod, prompt length
  and dispatch-time load, and differ in the rest.
* ``refreshed``: an older upstream EPP's, whose TPOT sample carries the pod's load at the
  answer's end (here: at the last dispatch to the pod before it), so only pod and prompt
  length match.
* ``unpaired``: no TPOT sample matched, every answer's length drawn or defaulted: what the
  product read from stored samples until the matching of backend/sim/pairing.py (it paired on
  every stored feature, and a request's two samples never agree on all of them).

    nice -n 15 .venv/bin/python bench/replay_fidelity.py --suites mooncake:0.75,azure:3.0 \
        --requests 1000 --slices 1,2,3 [--wire stored|refreshed|unpaired]
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import json
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from _common import machine

from backend.sim.fromsamples import (
    SampleRow,
    answer_lengths,
    build_workload,
    calibrate,
    record,
    rows_from_observations,
    simulate,
)
from backend.sim.online import FIELDS
from backend.sim.pairing import DISPATCH_LOAD
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.replay import Observation
from backend.sim.report import summarize
from backend.sim.traces.loader import Trace
from backend.sim.view import Slo

WIRES = ("stored", "refreshed", "unpaired")
_LOAD = tuple(FIELDS.index(name) for name in DISPATCH_LOAD)

REPLAY_SEED_OFFSET = 1000
"""The replay draws its own randomness (step noise, the policy's): the original run's seed
would replay its exact noise."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suites", default="mooncake:0.75,mooncake:1.0,azure:3.0,azure:4.0")
    ap.add_argument("--requests", type=int, default=1000, help="requests per slice")
    ap.add_argument("--slices", default="1,2,3", help="protocol slices (0: the tuning slice)")
    ap.add_argument("--policy", default="least-request")
    ap.add_argument("--steps", type=int, default=4, help="coarse golden-section steps")
    ap.add_argument("--calibration", choices=("split", "joint"), default="split")
    ap.add_argument("--wire", choices=WIRES, default="stored", help="see the module doc")
    args = ap.parse_args()
    slices = [int(s) for s in args.slices.split(",")]
    out: dict[str, Any] = {
        "machine": machine(),
        "policy": args.policy,
        "calibration": args.calibration,
        "wire": args.wire,
        "scale": f"reduced: {args.requests} requests per slice, slices {args.slices}",
        "suites": [],
    }
    for item in args.suites.split(","):
        name, _, load_text = item.partition(":")
        load = float(load_text)
        suite = dataclasses.replace(SUITES[name], slice_requests=args.requests)
        slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
        runs = []
        for index in slices:
            t0 = time.process_time()
            seed = max(0, index - 1)
            trace = arrivals(Job(suite, index, args.requests, load, "", (), seed, ()))
            result, observations = record(trace, suite.pods, suite.gpu, args.policy, slo, seed)
            truth = float(summarize(result, slo)["slo_attainment"] or 0.0)
            other = seed + REPLAY_SEED_OFFSET
            rows = wire_rows(observations, args.wire)
            workload = build_workload(rows, seed=other)
            cal = calibrate(
                workload, args.policy, slo, steps=args.steps, seed=other, mode=args.calibration
            )
            replayed = simulate(
                workload.trace, len(workload.pods), cal.pod, args.policy, slo, other
            ).slo_attainment
            run = {
                "slice": index,
                "seed": seed,
                "original_attainment": round(truth, 4),
                "replay_attainment": round(replayed, 4),
                "gap_points": round(100 * (replayed - truth), 2),
                "calibration": cal.summary(),
                "workload": workload.summary(),
                "pairing": pairing(observations, rows, trace),
                "cpu_s": round(time.process_time() - t0, 1),
            }
            runs.append(run)
            print(json.dumps({"suite": name, "load": load, **run}), flush=True)
        gaps = np.array([r["gap_points"] for r in runs])
        original = [r["original_attainment"] for r in runs]
        replayed = [r["replay_attainment"] for r in runs]
        summary = {
            "suite": name,
            "trace": suite.trace,
            "load": load,
            "runs": runs,
            "original_mean": round(100 * float(np.mean(original)), 2),
            "replay_mean": round(100 * float(np.mean(replayed)), 2),
            "mean_gap_points": round(float(gaps.mean()), 2),
            "gap_min_max": [round(float(gaps.min()), 2), round(float(gaps.max()), 2)],
            "mean_within_3_points": bool(abs(gaps.mean()) <= 3.0),
            "every_run_within_3_points": bool(np.abs(gaps).max() <= 3.0),
        }
        out["suites"].append(summary)
        print(json.dumps({k: v for k, v in summary.items() if k != "runs"}), flush=True)
    print(json.dumps(out, indent=1))


def wire_rows(observations: Sequence[Observation], wire: str) -> list[SampleRow]:
    rows = rows_from_observations(observations)
    if wire == "unpaired":
        return [r for r in rows if r.target == "ttft"]
    if wire == "refreshed":
        # Each pod's load at each dispatch (a TTFT sample's features, at its time less its TTFT).
        loads: dict[str, list[tuple[float, tuple[int, ...]]]] = defaultdict(list)
        for o in observations:
            if o.target == "ttft":
                load = tuple(int(o.row[i]) for i in _LOAD)
                loads[o.pod].append((o.time_s - o.label_ms / 1000.0, load))
        for pod_loads in loads.values():
            pod_loads.sort()
        times = {pod: [t for t, _ in pod_loads] for pod, pod_loads in loads.items()}
        out = []
        for r in rows:
            if r.target == "tpot" and r.pod in loads:
                at = bisect.bisect_right(times[r.pod], r.time_s) - 1
                r = dataclasses.replace(r, key=loads[r.pod][max(at, 0)][1])
            out.append(r)
        return out
    return rows


def pairing(
    observations: Sequence[Observation], rows: Sequence[SampleRow], trace: Trace
) -> dict[str, Any]:
    """How each request's TTFT sample was matched: the share matched, the share given exactly
    its true length (a wrong match gives another), and the mean length against the true one,
    over the requests that answered in more than one token (those post a TPOT sample)."""
    ttft = sorted(
        (
            (r, o.rid)
            for r, o in zip(rows_from_observations(observations), observations, strict=True)
            if r.target == "ttft"
        ),
        key=lambda p: p[0].time_s,
    )
    lengths = answer_lengths(
        [r for r, _ in ttft],
        sorted((r for r in rows if r.target == "tpot"), key=lambda r: r.time_s),
    )
    true = np.array([trace.output_tokens[rid] for _, rid in ttft])
    many = true > 1
    matched = lengths[many] > 0
    return {
        "requests_with_tpot": int(many.sum()),
        "matched_share": round(float(matched.mean()), 4) if many.any() else None,
        "exact_share": round(float((lengths[many] == true[many]).mean()), 4)
        if many.any()
        else None,
        "mean_length_ratio": (
            round(float(lengths[many][matched].mean() / true[many][matched].mean()), 4)
            if matched.any()
            else None
        ),
    }


if __name__ == "__main__":
    main()
