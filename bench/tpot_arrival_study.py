"""Does the pool's recent arrival count tell TPOT more than the wire row does? A study, not a
product path. Prints one line per slice.

    .venv/bin/python bench/tpot_arrival_study.py

Headroom's policy on the three evaluation slices (seeds 0-2) of Azure code at load 4 and
Mooncake at load 1. Each routed request's TPOT wire row (what the router predicted from) and
its actual TPOT; an XGBoost on log TPOT is fitted on the first 60 % of the requests by arrival
and scored (MAPE, median bias) on the rest, from the wire row alone and with the pool's
arrivals in the 5, 10 and 30 s before each request added. ``live served``: the router's own
online predictions on the same test requests.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import xgboost as xgb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, Simulation
from backend.sim.gpu import load_profile
from backend.sim.protocol import SUITES, Job, _pool, arrivals
from backend.sim.routers import make_policy
from backend.sim.view import Slo

Arrays = tuple[npt.NDArray[np.float64], ...]
WINDOWS_S = (5.0, 10.0, 30.0)


def run(suite: str, load: float, slice_index: int, seed: int) -> Arrays:
    """(wire rows, actual TPOT ms, arrival s, served TPOT ms) of one run's routed requests."""
    s = SUITES[suite]
    job = Job(s, slice_index, s.slice_requests, load, "headroom", (), seed, ())
    pool = list(_pool(s))
    transfer = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    config = SimConfig(Slo(s.ttft_slo_ms, s.tpot_slo_ms), seed=seed, transfer=transfer)
    sim = Simulation(arrivals(job), pool, make_policy("headroom", transfer, seed, {}), config)
    r = sim.run()
    keep = [
        i
        for i, route in enumerate(sim.routes)
        if route is not None and route.tpot_row is not None and r.tpot_ms[i] > 0
    ]
    rows = np.array([sim.routes[i].tpot_row for i in keep])  # type: ignore[union-attr]
    served = np.array([sim.routes[i].tpot_ms for i in keep])  # type: ignore[union-attr]
    return rows, r.tpot_ms[keep], r.arrival[keep], served


def _score(
    features: npt.NDArray[np.float64], y: npt.NDArray[np.float64], split: int
) -> tuple[float, float]:
    train = xgb.DMatrix(features[:split], label=np.log(y[:split]))
    model = xgb.train({"max_depth": 5, "eta": 0.05, "nthread": 1}, train, 200)
    p = np.exp(model.predict(xgb.DMatrix(features[split:])))
    rel = (p - y[split:]) / y[split:]
    return float(np.mean(np.abs(rel))), float(np.median(rel))


def study(suite: str, load: float) -> None:
    jobs = [(suite, load, k + 1, k) for k in range(3)]
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(run, *zip(*jobs, strict=True)))
    for k, (rows, y, t, served) in enumerate(results):
        order = np.argsort(t, kind="stable")
        rows, y, t, served = rows[order], y[order], t[order], served[order]
        recent = [
            np.searchsorted(t, t, "left") - np.searchsorted(t, t - w, "left") for w in WINDOWS_S
        ]
        split = int(len(y) * 0.6)
        wire = _score(rows, y, split)
        more = _score(np.column_stack([rows, *recent]), y, split)
        live = served[split:]
        ok = np.isfinite(live) & (live > 0)
        live_mape = float(np.mean(np.abs(live[ok] - y[split:][ok]) / y[split:][ok]))
        print(
            f"{suite} slice {k + 1}: n={len(y)} test={len(y) - split} "
            f"offline MAPE wire {wire[0]:.3f} (bias {wire[1]:+.3f}) | "
            f"+arrivals {more[0]:.3f} (bias {more[1]:+.3f}) | live served {live_mape:.3f}"
        )


if __name__ == "__main__":
    study("azure", 4.0)
    study("mooncake", 1.0)
