"""Saturation calibration: predicted share of SLO-meeting requests against the share measured. JSON.

    .venv/bin/python bench/saturation_calibration.py [--traces mooncake,azure] [--seeds 0,1]
        [--requests 1500] [--pods 4] [--relative 0.1,0.3,0.5,0.7,0.9,1.0,1.1,1.2]
        [--saturation-load azure=1.324] [--offset 0] [--arrival-window 120]
        [--present-weight 0.6] [--no-served] [--probe-every 5] [--max-probes 600]
        [--also-every 2,1] [--future 15] [--no-record] [--pd 2:2]

Per trace (the benchmark suites' traces and SLOs: Mooncake conversation at TTFT 2 s, Azure code
at 1 s, TPOT 100 ms both; ``a100-llama3-8b`` pods routed by Headroom's policy, trained online):

1. **Saturation load.** Runs at a coarse grid of loads (seed 0) find where the measured SLO
   attainment crosses the suite's capacity target (75 % on Mooncake, whose longest prompts miss
   2 s even alone; 90 % on Azure), interpolated between grid points: that load is 1.0x.
2. **The sweep.** At each relative load (idle to 1.2x) and seed, the simulation runs in 10 s
   slices; after a 60 s warm-up, at up to 60 evenly spaced instants (every 10 s at least)
   Headroom's saturation level is computed
   as the service computes it (``backend.scheduling.saturation`` over the pods' scraped gauges,
   32 representative requests from its profile of the newest first tokens, the router's own
   online models and policy; ``backend.sim.autoscale.Probe``). Predicted: 1 - level.
   Measured: the share of the requests arriving before the next probe that met both SLOs.
   Each load reports the means over
   its probes and the gap (predicted - measured), mean and min-max over seeds. Three levels
   per probe, from one computation: ``predicted``, the service's level (``--present-weight``'s
   mix of the other two), ``*_present`` with the pods as they stand, and ``*_next`` for the
   next interval (the last ``--arrival-window`` seconds of arrivals replayed from now; with no
   arrival in the window, the present level).
3. **At the service's refresh.** The same simulation also computes the level every
   ``--probe-every`` seconds (the service's ``interval_s``, 5 s; at most ``--max-probes`` a
   run), each against the requests arriving until the next: each request against the level in
   force when it arrived, as a gateway reading the latest level meets it. Reported per run and
   per load under ``refresh``; the figures above are the coarse grid's. ``--also-every 2,1``
   measures other refresh intervals the same way from the same simulation (``refresh_also``).

4. **Corrected by its own record** (the service's default, ``--no-record`` without): each
   level less the bias its record shows over the last 300 s up to 30 s ago
   (``backend.scheduling.record``, read from what the samples posted by then measured); the
   same instants' uncorrected levels are measured beside it, under ``uncorrected``.

Reduced scale on a shared 2-core machine: ``--requests`` per run and ``--pods`` pods.
``--offset`` starts the slice later in the trace (a tuning slice disjoint from the first
requests); ``--arrival-window`` is the service's ``arrival_window_s``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.record import LevelRecord
from backend.scheduling.types import TransferConfig
from backend.settings import CapacitySettings
from backend.sim.autoscale import Probe, meets_slo, slo_attainment
from backend.sim.engine import SimConfig, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.protocol import SUITES
from backend.sim.routers import OURS, make_policy
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces import TenantModel, load_trace
from backend.sim.view import Slo
from bench._common import machine, mean_min_max

SLICE_S = 10.0
WARMUP_S = 60.0
# At low load a run spans hours of simulated time: probes are spread to at most this many (the
# measured window is the gap between probes).
MAX_PROBES = 60
GRID = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _setup(suite_name: str, args: argparse.Namespace, load: float, seed: int) -> Simulation:
    suite = SUITES[suite_name]
    pool = build_pool(args.pods, suite.gpu, args.pd)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    tenants = TenantModel(seed=seed) if suite.trace.startswith("azure") else None
    full = load_trace(suite.trace, tenants)
    part = np.zeros(len(full), dtype=np.bool_)
    part[args.offset : args.offset + args.requests] = True
    trace = full.select(part).scaled(load)
    router = make_policy(OURS, fabric, seed)
    slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
    # At low load the same requests span hours: retrain at most about 100 times a run (every
    # 10 simulated seconds otherwise), or the fits dominate the run.
    retrain = max(10.0, float(trace.arrival_s[-1]) / 100)
    # A P/D pool moves each request's KV from its prefill pod to its decode pod over the fabric
    # its router prices (``fromsamples.record``'s); an aggregated pool's runs stay as on file.
    transfer = {"transfer": fabric} if args.pd else {}
    return Simulation(
        trace, pool, router, SimConfig(slo=slo, seed=seed, retrain_interval_s=retrain, **transfer)
    )


def saturation_load(suite_name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The load (x the trace's rate) where measured attainment crosses the capacity target."""
    target = SUITES[suite_name].capacity_target
    seen: list[tuple[float, float]] = []
    for load in GRID:
        sim = _setup(suite_name, args, load, 0)
        att = slo_attainment(sim.run(), sim.config.slo)
        seen.append((load, att))
        print(f"{suite_name} load {load}: attainment {att:.3f}", file=sys.stderr, flush=True)
        if att < target:
            break
    (lo, a_lo), (hi, a_hi) = (seen[-2], seen[-1]) if len(seen) > 1 else (seen[0], seen[0])
    if a_hi >= target:
        raise SystemExit(f"{suite_name}: still within the target at load {hi}; extend GRID")
    at = hi if a_lo == a_hi else lo + (a_lo - target) / (a_lo - a_hi) * (hi - lo)
    return {"load": round(at, 3), "target": target, "grid": seen}


def probe_run(suite_name: str, args: argparse.Namespace, load: float, seed: int) -> dict[str, Any]:
    sim = _setup(suite_name, args, load, seed)
    router = sim.policy
    assert isinstance(router, PredictedLatency)
    # The service's level: the mix of the pods as they stand and the next interval (the last
    # ``--arrival-window`` seconds of arrivals replayed from now), both parts kept.
    probe = Probe(
        sim,
        router,
        profile_size=CapacitySettings().profile_size,
        arrival_window_s=args.arrival_window,
        present_weight=args.present_weight,
        served=not args.no_served,
        future_s=args.future,
        record=_record(not args.record_product) if args.record else None,
        tpot_at_end=args.tpot_at_end or args.lengths_unknown,
        lengths=not args.lengths_unknown,
    )
    pods = list(range(len(sim.servers)))
    span = float(sim.trace.arrival_s[-1])
    # Two grids of instants after the warm-up, from one simulation: the coarse one (at most
    # MAX_PROBES, each level against the requests until the next instant) and the service's
    # refresh (every --probe-every seconds, at most --max-probes: each request against the
    # level in force when it arrived). Both are accumulated as the coarse loop always was, so
    # the coarse figures are those of runs made before the refresh grid existed.
    coarse_every = max(SLICE_S, (span - WARMUP_S) / MAX_PROBES)
    refresh_every = max(args.probe_every, (span - WARMUP_S) / args.max_probes)
    # Other refresh intervals measured on the same simulation (--also-every): each its own grid
    # of instants, each request against the level of that grid in force when it arrived.
    also = {
        f"{every:g}": max(every, (span - WARMUP_S) / args.max_probes)
        for every in (float(e) for e in args.also_every.split(",") if e)
    }
    spacing = {"coarse": coarse_every, "refresh": refresh_every}
    spacing |= {f"refresh_{name}": every for name, every in also.items()}
    grids: dict[str, list[float]] = {}
    for name, every in spacing.items():
        t, grid = 0.0, []
        while t <= span + every:
            grid.append(t)  # the warm-up's steps only run the simulation: no level there
            t += SLICE_S if t < WARMUP_S else every
        grids[name] = grid
    levels: dict[float, tuple[float, float, float]] = {}
    # With --record, the same instants' levels before the correction, and its bias per instant.
    raw: dict[float, tuple[float, float, float]] = {}
    biases: list[float] = []
    for t in sorted(set().union(*grids.values())):
        if not sim.run_until(t):
            break
        sim.view.now = t
        if t >= WARMUP_S:
            sat = probe.saturation(pods)
            if sat is not None and sat.present_level is not None:
                later = sat.next_level if sat.next_level is not None else sat.present_level
                levels[t] = (1.0 - sat.level, 1.0 - sat.present_level, 1.0 - later)
                before = sat.uncorrected_level if sat.uncorrected_level is not None else sat.level
                raw[t] = (1.0 - before, 1.0 - sat.present_level, 1.0 - later)
                if sat.record_bias is not None:
                    biases.append(sat.record_bias)
    result = sim.run()
    slo = sim.config.slo
    ok = meets_slo(result, slo)
    coarse = _measured(grids["coarse"], coarse_every, levels, result.arrival, ok)
    if coarse is None:
        return {"load": load, "seed": seed, "probes": 0}
    refresh = _measured(grids["refresh"], refresh_every, levels, result.arrival, ok)
    detail = coarse.pop("detail")
    if refresh is not None:
        refresh_detail = refresh.pop("detail")
        refresh["every_s"] = round(refresh_every, 3)
        if args.refresh_detail:  # where within a run a gap comes from, per 5 s instant
            refresh["probes_detail"] = refresh_detail
    refresh_also = {}
    for name, every in also.items():
        other = _measured(grids[f"refresh_{name}"], every, levels, result.arrival, ok)
        if other is not None:
            other.pop("detail")
            refresh_also[name] = {**other, "every_s": round(every, 3)}
    uncorrected = {}
    if args.record:  # the shipped level's measures from the same simulation, for A/B
        for name, every in (("coarse", coarse_every), ("refresh", refresh_every)):
            before = _measured(grids[name], every, raw, result.arrival, ok)
            if before is not None:
                before.pop("detail")
                uncorrected[name] = before
        uncorrected["corrected_instants"] = len(biases)
        uncorrected["instants"] = len(raw)
        uncorrected["mean_bias_points"] = round(100 * float(np.mean(biases)), 2) if biases else None
    return {
        "load": load,
        "seed": seed,
        **coarse,
        **({"uncorrected": uncorrected} if uncorrected else {}),
        "run_attainment": round(slo_attainment(result, slo), 4),
        # Per probe, in time order: (time s, present, next, measured, requests measured), for
        # studies of other ways to combine the two levels (bench/saturation_mix.py).
        "probes_detail": detail,
        "refresh": refresh,
        **({"refresh_also": refresh_also} if refresh_also else {}),
    }


def _record(bounded: bool) -> LevelRecord:
    """The service's record, as its settings make it."""
    s = CapacitySettings()
    return LevelRecord(s.record_horizon_s, s.record_delay_s, s.record_min_requests, bounded)


def _measured(
    grid: list[float],
    every: float,
    levels: dict[float, tuple[float, float, float]],
    arrival: npt.NDArray[np.float64],
    ok: npt.NDArray[np.bool_],
) -> dict[str, Any] | None:
    """Each instant's level against the requests arriving in the ``every`` seconds after it
    (the mean weighted by those requests), or None with no instant measured."""
    pairs = []
    for at in grid:
        if at not in levels:
            continue
        pred, pred_now, pred_next = levels[at]
        mask = (arrival >= at) & (arrival < at + every)
        if mask.any():
            pairs.append((pred, pred_now, pred_next, float(ok[mask].mean()), int(mask.sum()), at))
    if not pairs:
        return None
    pred_arr = np.array([p[0] for p in pairs])
    now_arr = np.array([p[1] for p in pairs])
    next_arr = np.array([p[2] for p in pairs])
    meas_arr = np.array([p[3] for p in pairs])
    weights = np.array([p[4] for p in pairs], dtype=np.float64)
    return {
        "probes": len(pairs),
        "predicted": round(float(np.average(pred_arr, weights=weights)), 4),
        "predicted_present": round(float(np.average(now_arr, weights=weights)), 4),
        "predicted_next": round(float(np.average(next_arr, weights=weights)), 4),
        "measured": round(float(np.average(meas_arr, weights=weights)), 4),
        "per_probe_mae": round(float(np.mean(np.abs(pred_arr - meas_arr))), 4),
        "per_probe_mae_present": round(float(np.mean(np.abs(now_arr - meas_arr))), 4),
        "per_probe_mae_next": round(float(np.mean(np.abs(next_arr - meas_arr))), 4),
        "detail": [
            [round(p[5], 1), round(p[1], 4), round(p[2], 4), round(p[3], 4), p[4]] for p in pairs
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default="mooncake,azure")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument(
        "--offset",
        type=int,
        default=0,
        help="the slice starts at this request (0: the evaluation slice; a later disjoint "
        "block, e.g. --offset 3000 --requests 3000, is a tuning slice)",
    )
    parser.add_argument(
        "--arrival-window",
        type=float,
        default=CapacitySettings().arrival_window_s,
        help="seconds of arrivals replayed for the next interval (the service's "
        "HEADROOM_CAPACITY__ARRIVAL_WINDOW_S; its default)",
    )
    parser.add_argument(
        "--present-weight",
        type=float,
        default=CapacitySettings().present_weight,
        help="the level's weight on the pods as they stand (the service's "
        "HEADROOM_CAPACITY__PRESENT_WEIGHT; its default); both parts are reported",
    )
    parser.add_argument(
        "--no-served",
        action="store_true",
        help="the replay's latency tables as the models give them, not scaled to the recent "
        "requests' measured latency (the service's default), for A/B",
    )
    parser.add_argument(
        "--probe-every",
        type=float,
        default=CapacitySettings().interval_s,
        help="the refresh grid: the level every this many seconds, each against the requests "
        "arriving until the next (the service's HEADROOM_CAPACITY__INTERVAL_S; its default)",
    )
    parser.add_argument(
        "--future",
        type=float,
        default=0.0,
        help="S > 0: a reference, not the service's level: the replay is of the trace's next S "
        "seconds of arrivals instead of the past's (what forecasting the traffic could buy; "
        "backend.sim.autoscale.Probe future_s)",
    )
    parser.add_argument(
        "--record",
        action=argparse.BooleanOptionalAction,
        default=CapacitySettings().record_correction,
        help="the level corrected by its own record (backend.scheduling.record; the service's "
        "HEADROOM_CAPACITY__RECORD_CORRECTION, its default), and under 'uncorrected' the same "
        "instants' levels without it, from the same simulation; --no-record: the forecast alone",
    )
    parser.add_argument(
        "--record-product",
        action="store_true",
        help="the record's measured joint share as the targets' ratios' product alone, "
        "without the bounds the measured targets set (as first measured), for A/B",
    )
    parser.add_argument(
        "--tpot-at-end",
        action="store_true",
        help="the record takes each TPOT outcome at the answer's end, as the service takes an "
        "upstream EPP's TPOT sample matched to no TTFT sample (no length); default: at its "
        "first token",
    )
    parser.add_argument(
        "--lengths-unknown",
        action="store_true",
        help="no answer's length known (mean output 1, no TPOT seconds; TPOT outcomes at the "
        "end): the level as the service read an unchanged EPP's samples before each request's "
        "two were matched (backend/sim/pairing.py), for A/B",
    )
    parser.add_argument(
        "--also-every",
        default="",
        help="S,...: the refresh measure at these intervals too, from the same simulation "
        "(per run and per load under refresh_also; a level every S seconds, each request "
        "against the one in force when it arrived), to weigh another interval_s",
    )
    parser.add_argument(
        "--max-probes",
        type=int,
        default=600,
        help="the refresh grid's instants at most (wider apart on runs spanning hours)",
    )
    parser.add_argument(
        "--refresh-detail",
        action="store_true",
        help="keep the refresh grid's instants in each run's JSON (refresh.probes_detail: "
        "time, present, next, measured, requests), as the coarse grid's always are",
    )
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument(
        "--pd",
        default=None,
        help="a P/D split of --pods, e.g. 2:2: the level of a P/D pool (TTFT read on the "
        "prefill pod the chain pairs, TPOT on the decode pod) against its measured attainment",
    )
    parser.add_argument("--relative", default="0.1,0.3,0.5,0.7,0.9,1.0,1.1,1.2")
    parser.add_argument(
        "--saturation-load",
        default="",
        help="TRACE=LOAD,...: take 1.0x from an earlier run's search instead of searching "
        "(the search runs seed 0 only and does not use the level)",
    )
    args = parser.parse_args()
    started = time.time()
    seeds = [int(s) for s in args.seeds.split(",")]
    out: dict[str, Any] = {}
    given = dict(item.split("=") for item in args.saturation_load.split(",") if item)
    for suite_name in args.traces.split(","):
        if suite_name in given:
            sat = {"load": float(given[suite_name]), "given": True}
        else:
            sat = saturation_load(suite_name, args)
        rows = []
        for rel in (float(r) for r in args.relative.split(",")):
            runs = [probe_run(suite_name, args, rel * sat["load"], seed) for seed in seeds]
            runs = [r for r in runs if r.get("probes")]
            if not runs:
                continue
            row: dict[str, Any] = {
                "relative_load": rel,
                "load": round(rel * sat["load"], 3),
                "predicted_meeting": mean_min_max([r["predicted"] for r in runs]),
                "measured_meeting": mean_min_max([r["measured"] for r in runs]),
                "gap_points": mean_min_max([100 * (r["predicted"] - r["measured"]) for r in runs]),
                "predicted_meeting_present": mean_min_max([r["predicted_present"] for r in runs]),
                "gap_points_present": mean_min_max(
                    [100 * (r["predicted_present"] - r["measured"]) for r in runs]
                ),
                "gap_points_next": mean_min_max(
                    [100 * (r["predicted_next"] - r["measured"]) for r in runs]
                ),
                "runs": runs,
            }
            fresh = [r["refresh"] for r in runs if r.get("refresh")]
            if fresh:
                row["refresh"] = {
                    "every_s": mean_min_max([r["every_s"] for r in fresh]),
                    "predicted_meeting": mean_min_max([r["predicted"] for r in fresh]),
                    "measured_meeting": mean_min_max([r["measured"] for r in fresh]),
                    "gap_points": mean_min_max(
                        [100 * (r["predicted"] - r["measured"]) for r in fresh]
                    ),
                    "gap_points_present": mean_min_max(
                        [100 * (r["predicted_present"] - r["measured"]) for r in fresh]
                    ),
                }
            before = [r["uncorrected"] for r in runs if r.get("uncorrected")]
            if before:
                row["uncorrected"] = {
                    name: mean_min_max(
                        [
                            100 * (r[part]["predicted"] - r[part]["measured"])
                            for r in before
                            if part in r
                        ]
                    )
                    for name, part in (("gap_points", "coarse"), ("refresh_gap_points", "refresh"))
                }
                row["uncorrected"]["mean_bias_points"] = mean_min_max(
                    [r["mean_bias_points"] for r in before if r["mean_bias_points"] is not None]
                    or [0.0]
                )
            for name in sorted({k for r in runs for k in r.get("refresh_also", {})}, key=float):
                other = [r["refresh_also"][name] for r in runs if name in r.get("refresh_also", {})]
                row.setdefault("refresh_also", {})[name] = {
                    "every_s": mean_min_max([r["every_s"] for r in other]),
                    "predicted_meeting": mean_min_max([r["predicted"] for r in other]),
                    "measured_meeting": mean_min_max([r["measured"] for r in other]),
                    "gap_points": mean_min_max(
                        [100 * (r["predicted"] - r["measured"]) for r in other]
                    ),
                }
            rows.append(row)
            print(f"{suite_name} x{rel}: {json.dumps(row)}", file=sys.stderr, flush=True)
        out[suite_name] = {
            "trace": SUITES[suite_name].trace,
            "saturation": sat,
            "table": rows,
            "within_5_points": all(abs(r["gap_points"]["mean"]) <= 5.0 for r in rows),
            "within_5_points_refresh": all(
                abs(r["refresh"]["gap_points"]["mean"]) <= 5.0 for r in rows if "refresh" in r
            ),
        }
    print(
        json.dumps(
            {
                "machine": machine(),
                "config": {**vars(args), "slice_s": SLICE_S, "warmup_s": WARMUP_S, "router": OURS},
                "results": out,
                "wall_s": round(time.time() - started, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
