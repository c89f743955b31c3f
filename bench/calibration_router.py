"""What one pool-replay calibration costs routed by desired replicas' router and by a new pool's
predicted-latency chain (which learns online in the simulator), on the same replay; prints JSON.

    python bench/calibration_router.py --requests 600

The replay is built from the samples a simulated Mooncake pool (8 A100 pods, load 1, routed by
Headroom's policy) posts, as ``pool-replay`` builds it; each calibration is
``backend.sim.fromsamples.calibrate`` with the service's steps. CPU seconds of this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.advisor.search import protocol_policy
from backend.policies.schemas import PolicySpec
from backend.sim.fromsamples import (
    CALIBRATION_STEPS,
    Router,
    build_workload,
    calibrate,
    record,
    rows_from_observations,
)
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.routers import OURS, POLICIES
from backend.sim.view import Slo
from bench._common import machine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    args = parser.parse_args()
    n = args.requests
    suite = dataclasses.replace(SUITES["mooncake"], slice_requests=n)
    original = arrivals(Job(suite, 0, n, 1.0, "", (), 0, ()))
    slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
    _, observations = record(original, suite.pods, suite.gpu, OURS, slo)
    replay = build_workload(rows_from_observations(observations))
    policy, options = protocol_policy(PolicySpec())
    factory = POLICIES[policy]
    routers: dict[str, Router] = {
        "llm-d-322 (desired replicas' router)": "llm-d-322",
        "predicted chain, a new pool's policy": lambda t, s: factory(t, s, dict(options)),
    }
    out: dict[str, Any] = {"machine": machine(), "requests": len(replay.trace), "pods": suite.pods}
    for name, router in routers.items():
        started = time.process_time()
        cal = calibrate(replay, router, slo, steps=CALIBRATION_STEPS)
        out[name] = {"cpu_s": round(time.process_time() - started, 1), **cal.summary()}
        print(name, out[name], file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
