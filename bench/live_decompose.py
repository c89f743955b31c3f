"""Where the live TTFT error goes: a decomposition against the present-state floor. JSON.

    .venv/bin/python bench/live_decompose.py [--suite azure:4] [--seeds 0] [--requests N]
        [--fresh-gauges] [--no-hold] [--tuning-slice] [--dump PREFIX]

Runs Headroom's policy on evaluation slice ``i + 1`` with seed ``seeds[i]`` (the settings of
``bench/live_accuracy.py``: benchmark defaults, the floor on every 10th request after 60 s) and
records, for every routed request, the wire row it was predicted from and what the chosen pod
really held at that instant (which no router can read): its true gauges, the uncached prompt
tokens still to prefill ahead of the request, its decode batch, and how long the iteration in
progress still runs. It then prints, on the floor's sampled requests (like for like):

- ``live``: the served predictions (online training, live calibration);
- ``oracle_wire``: a hybrid model trained offline on the whole run's own rows (two-fold
  cross-fit by blocks of requests), the same wire features: what online training lag costs;
- ``oracle_wire_no_progress``: the same without the pods' progress fields
  (``ms_since_last_token``, ``oldest_prefill_wait_ms``: 0, as upstream's EPP sends them);
- ``oracle_wire_router``: plus what the router itself knows and does not send (requests it
  dispatched to the pod and that are unfinished; those dispatched since the pod's last scrape);
- ``oracle_true_gauges``: the wire row with the scraped gauges replaced by the true ones;
- ``oracle_true_work``: plus the true prefill tokens ahead and the decode batch;
- ``oracle_true_all``: plus the remaining time of the iteration in progress;
- ``floor``: the noise-free copy of the pod with no later arrivals;

and the live error by load decile, by prompt-length quintile, and for requests sent while the
pod had prompt tokens to prefill ahead of them against those sent with none.
``--fresh-gauges`` runs the simulation with the router reading the pods' true gauges at every
decision (``SimConfig.scrape_interval_s = 0``, a measurement option: no real router can).
``--tuning-slice`` runs every seed on slice 0, where a model change is explored before the
evaluation slices report it; ``--dump`` saves each run's rows (``PREFIX.SEED.npz``) for such
exploration offline.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.predictor.features import (
    PROGRESS_FIELDS,
    TTFT_BASE_FEATURES,
    TTFT_FEATURES,
    ttft_features,
)
from backend.predictor.regressors import HybridModel
from backend.scheduling.types import TransferConfig
from backend.sim.engine import FLOOR_EVERY, SimConfig, SimResult, Simulation
from backend.sim.gpu import load_profile
from backend.sim.online import columns
from backend.sim.protocol import SUITES, Job, _pool, arrivals, machine
from backend.sim.routers import OURS, OURS_PREDICTED, ours_config
from backend.sim.routers.base import Route
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.server import Request, Server
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import Slo

FLOOR_WARMUP_S = SimConfig.floor_warmup_s
BLOCK = 100
"""Cross-fit folds alternate by blocks of this many requests (neighbours share load)."""

ROUTER_EXTRA = ("dispatched_unfinished", "dispatched_since_scrape")
TRUE_GAUGES = ("kv_cache_percentage", "num_request_waiting", "num_request_running")
TRUE_WORK = ("true_prefill_ahead", "true_decoders", "true_decode_ctx_k")
TRUE_PHASE = ("iteration_left_ms",)
FloatArray = npt.NDArray[np.float64]


def true_state(server: Server, req: Request, now: float) -> dict[str, float]:
    """What the pod really holds at ``now``: the present a clone of it would start from."""
    ahead = 0
    for s in server.running:
        if not s.prefilled:
            ahead += s.target - s.computed
    for s in server.waiting:
        hit = min(server.prefix_hit_units(s.req.units) * UNIT_TOKENS, s.target - 1)
        ahead += s.target - max(hit, 0) if not s.remote else 0
    decoders = [s for s in server.running if s.prefilled]
    left = 0.0
    if server.busy and server._steps:
        # The iteration in progress is the first whose end is after now.
        ends = server._ends[: server._steps]
        nxt = next((e for e in ends if e > now), ends[-1])
        left = max(nxt - now, 0.0) * 1000.0
    m = server.metrics()
    return {
        "kv_cache_percentage": m.kv_cache_usage,
        "num_request_waiting": float(m.num_waiting),
        "num_request_running": float(m.num_running),
        "true_prefill_ahead": float(ahead),
        "true_decoders": float(len(decoders)),
        "true_decode_ctx_k": sum(s.ctx for s in decoders) / 1000.0,
        "iteration_left_ms": left,
    }


class Recording(PredictedLatency):
    """Headroom's policy, recording at each decision what its chosen pod really held."""

    def __init__(self, transfer: TransferConfig, seed: int, hold: bool = True) -> None:
        # Headroom's policy holds its decisions until dispatch (backend/scheduling/decided.py);
        # ``hold`` False measures it as before the ledger (a decision counts once dispatched).
        config = ours_config(transfer)
        config = config if hold else replace(config, decided_hold_ms=0.0)
        super().__init__(OURS, OURS_PREDICTED, config, seed=seed)
        self.extra: dict[int, dict[str, float]] = {}
        self._dispatch_times: list[list[float]] = []

    def route(self, req: Request) -> Route:
        route = super().route(req)
        if route.shed or route.prefill is not None:
            return route
        v = self.view
        if not self._dispatch_times:
            self._dispatch_times = [[] for _ in v.servers]
        pod = route.pod
        scraped_at = v.last_scrape(pod)
        times = self._dispatch_times[pod]
        state = true_state(v.servers[pod], req, v.now)
        state["dispatched_unfinished"] = float(v.dispatched[pod])
        state["dispatched_since_scrape"] = float(sum(1 for t in times[-64:] if t > scraped_at))
        self.extra[req.rid] = state
        return route

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        super().on_dispatch(req, route, now)
        if self._dispatch_times:
            self._dispatch_times[route.pod].append(now)


def simulate(
    suite: str, load: float, replicate: int, seed: int, n: int, fresh: bool, hold: bool
) -> Any:
    s = SUITES[suite]
    job = Job(s, replicate + 1, n, load, OURS, (), seed, ())
    pool = list(_pool(s))
    transfer = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    policy = Recording(transfer, seed, hold)
    config = SimConfig(
        Slo(s.ttft_slo_ms, s.tpot_slo_ms),
        seed=seed,
        transfer=transfer,
        floor_every=FLOOR_EVERY,
        floor_warmup_s=FLOOR_WARMUP_S,
        scrape_interval_s=0.0 if fresh else 0.05,
    )
    sim = Simulation(arrivals(job), pool, policy, config)
    return sim, policy, sim.run()


def _mape(est: FloatArray, actual: FloatArray) -> dict[str, float]:
    rel = (est - actual) / actual
    rel = rel[np.isfinite(rel)]
    return {
        "n": int(rel.size),
        "mape_pct": round(100 * float(np.mean(np.abs(rel))), 2),
        "median_bias_pct": round(100 * float(np.median(rel)), 2),
    }


def crossfit(
    X: npt.NDArray[np.float32], y: FloatArray, names: tuple[str, ...], base: tuple[str, ...]
) -> FloatArray:
    """Out-of-fold predictions of a hybrid model, two folds by alternating request blocks."""
    fold = (np.arange(len(y)) // BLOCK) % 2
    out = np.full(len(y), np.nan)
    for k in (0, 1):
        train = fold != k
        model = HybridModel(names, base_features=base).fit(X[train], y[train])
        out[fold == k] = model.predict(X[fold == k])
    return out


def decompose(
    sim: Simulation, policy: Recording, result: SimResult, dump: str | None = None
) -> dict[str, Any]:
    actual = result.ttft_ms
    rids = np.asarray(
        [
            rid
            for rid, r in enumerate(sim.routes)
            if r is not None
            and r.ttft_row is not None
            and np.isfinite(r.ttft_ms)
            and rid in policy.extra
            and np.isfinite(actual[rid])
        ]
    )
    rows = np.asarray([sim.routes[i].ttft_row for i in rids], dtype=np.float64)  # type: ignore[union-attr]
    y = actual[rids]
    wire = dict(columns(rows))
    extra = {k: np.asarray([policy.extra[i][k] for i in rids]) for k in policy.extra[rids[0]]}

    def variant(
        replace: tuple[str, ...], add: tuple[str, ...], base_add: tuple[str, ...]
    ) -> FloatArray:
        cols = {**wire, **{k: extra[k] for k in replace}}
        X = ttft_features(cols)
        if add:
            X = np.column_stack([X, *[extra[k] for k in add]]).astype(np.float32)
        names = (*TTFT_FEATURES, *add)
        return crossfit(X, y, names, (*TTFT_BASE_FEATURES, *base_add))

    sampled = np.isfinite(result.floor_ttft_ms[rids])
    live = result.predicted_ttft_ms[rids]
    if dump is not None:
        np.savez(
            dump,
            rows=rows,
            y=y,
            live=live,
            floor=result.floor_ttft_ms[rids],
            load=result.dispatch_load[rids],
            arrival=result.arrival[rids],
            pod=result.pod[rids],
            rid=rids,
            **{f"x_{k}": v for k, v in extra.items()},
        )
    estimates: dict[str, FloatArray] = {
        "live": live,
        "oracle_wire": variant((), (), ()),
        "oracle_wire_no_progress": crossfit(
            ttft_features({**wire, **{k: np.zeros(len(y)) for k in PROGRESS_FIELDS}}),
            y,
            TTFT_FEATURES,
            TTFT_BASE_FEATURES,
        ),
        "oracle_wire_router": variant((), ROUTER_EXTRA, ROUTER_EXTRA),
        "oracle_true_gauges": variant(TRUE_GAUGES, (), ()),
        "oracle_true_work": variant(TRUE_GAUGES, TRUE_WORK, ("true_prefill_ahead",)),
        "oracle_true_all": variant(
            TRUE_GAUGES, (*TRUE_WORK, *TRUE_PHASE), ("true_prefill_ahead", *TRUE_PHASE)
        ),
        "floor": result.floor_ttft_ms[rids],
    }
    table = {name: _mape(est[sampled], y[sampled]) for name, est in estimates.items()}
    table_all = {name: _mape(est, y) for name, est in estimates.items() if name != "floor"}
    rel = (live - y) / y
    load = result.dispatch_load[rids]
    by_load = []
    for g in np.array_split(np.argsort(load, kind="stable"), 10):
        by_load.append(
            {
                "load": [int(load[g].min()), int(load[g].max())],
                "live_mape_pct": round(100 * float(np.mean(np.abs(rel[g]))), 1),
                "live_bias_pct": round(100 * float(np.median(rel[g])), 1),
                "oracle_wire_mape_pct": round(
                    100 * float(np.mean(np.abs(estimates["oracle_wire"][g] / y[g] - 1))), 1
                ),
                "median_ttft_ms": round(float(np.median(y[g])), 0),
            }
        )
    prompt = rows[:, 1]
    by_prompt = []
    for g in np.array_split(np.argsort(prompt, kind="stable"), 5):
        by_prompt.append(
            {
                "prompt": [int(prompt[g].min()), int(prompt[g].max())],
                "live_mape_pct": round(100 * float(np.mean(np.abs(rel[g]))), 1),
                "live_bias_pct": round(100 * float(np.median(rel[g])), 1),
                "oracle_wire_mape_pct": round(
                    100 * float(np.mean(np.abs(estimates["oracle_wire"][g] / y[g] - 1))), 1
                ),
                "median_ttft_ms": round(float(np.median(y[g])), 0),
            }
        )
    # Requests sent while the pod still had prompt tokens to prefill ahead of them (a prefill
    # in progress or waiting) against those sent to a pod with none: where the gap to the
    # floor sits.
    behind = extra["true_prefill_ahead"] > 0
    floor = estimates["floor"]
    by_ahead = {}
    for name, g in (("prefill_ahead", behind), ("nothing_ahead", ~behind)):
        on_floor = g & sampled
        by_ahead[name] = {
            "share_of_requests": round(float(np.mean(g)), 3),
            "share_of_live_abs_error": round(float(np.abs(rel[g]).sum() / np.abs(rel).sum()), 3),
            "live_mape_pct": round(100 * float(np.mean(np.abs(rel[g]))), 1) if g.any() else None,
            "sampled": int(on_floor.sum()),
            "sampled_live_mape_pct": _mape(live[on_floor], y[on_floor]) if on_floor.any() else None,
            "sampled_floor_mape_pct": _mape(floor[on_floor], y[on_floor])
            if on_floor.any()
            else None,
            "oracle_true_work_mape_pct": _mape(estimates["oracle_true_work"][g], y[g])
            if g.any()
            else None,
        }
    # How stale the scraped gauges were against the truth at decision time.
    stale = {k: round(float(np.mean(np.abs(wire[k] - extra[k]))), 3) for k in TRUE_GAUGES}
    return {
        "rows": len(rids),
        "sampled": int(sampled.sum()),
        "ttft_sampled": table,
        "ttft_all": table_all,
        "by_load_decile": by_load,
        "by_prompt_quintile": by_prompt,
        "by_prefill_ahead": by_ahead,
        "mean_abs_gauge_staleness": stale,
        "mean_iteration_left_ms": round(float(np.mean(extra["iteration_left_ms"])), 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="azure:4")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--fresh-gauges", action="store_true")
    parser.add_argument(
        "--no-hold",
        action="store_true",
        help="the router counts a decision only once dispatched (Headroom's policy before the "
        "ledger's hold)",
    )
    parser.add_argument("--dump", default=None, help="save each run's rows here (.npz, per seed)")
    parser.add_argument(
        "--tuning-slice", action="store_true", help="every seed on slice 0 (the tuning slice)"
    )
    args = parser.parse_args(argv)
    name, _, load = args.suite.partition(":")
    n = args.requests or SUITES[name].slice_requests
    runs = []
    for i, seed in enumerate(int(s) for s in args.seeds.split(",")):
        started = time.perf_counter()
        replicate = -1 if args.tuning_slice else i
        sim, policy, result = simulate(
            name, float(load), replicate, seed, n, args.fresh_gauges, not args.no_hold
        )
        runs.append(
            {
                "seed": seed,
                "slice": replicate + 1,
                "wall_s": round(time.perf_counter() - started, 1),
                **decompose(sim, policy, result, f"{args.dump}.{seed}.npz" if args.dump else None),
            }
        )
    print(
        json.dumps(
            {
                "machine": machine(),
                "setup": {
                    "suite": args.suite,
                    "requests_per_slice": n,
                    "fresh_gauges": args.fresh_gauges,
                    "decisions_held": not args.no_hold,
                    "slices": "the tuning slice (0)" if args.tuning_slice else "evaluation",
                    "floor_every": FLOOR_EVERY,
                    "cross_fit_block": BLOCK,
                },
                "runs": runs,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
