"""Where the advisor's workload comes from.

Two sources, one interface (:class:`backend.advisor.search.Workload`):

* ``shipped-trace``: a trace shipped with the simulator (Mooncake conversation, Azure code) cut
  into the benchmark protocol's disjoint slices on its suite's pool, at the suite's higher tuning
  load (where routing decisions matter). It is *not* the pool's own traffic, and the result says
  so.
* ``pool-replay``: the pool's own traffic rebuilt from its recent samples
  (``backend/sim/fromsamples.py``), read and calibrated the way desired replicas does it
  (``backend/capacity/desired.py``: the same lookback, the calibration cached per pool and
  router), on the pod count seen, at the load it was recorded at. The default when the pool has
  enough traffic. The replay is calibrated routed by the pool's active policy, unless that is
  the predicted-latency chain on a replay too long for its cost (:func:`calibration_router`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Final

import numpy as np
from sqlalchemy.orm import Session

from backend.advisor.search import Budget, Workload, run_as
from backend.capacity.desired import (
    CalibrationRouter,
    desired_router,
    policy_slo,
    pool_calibration,
    pool_profiles,
    recent_rows,
)
from backend.exceptions import Invalid
from backend.policies.schemas import PolicySpec
from backend.policies.service import policy_for_pool, spec_of
from backend.samples.models import TargetCode
from backend.samples.repository import count_recent
from backend.settings import CapacitySettings
from backend.sim.fromsamples import Calibration, build_workload
from backend.sim.fromsamples import Workload as SampleWorkload
from backend.sim.pool import build_pool, parse_gpu_mix
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.routers import POLICIES
from backend.sim.traces.loader import Trace
from backend.sim.view import Slo

# Workload name -> the protocol suite whose trace, pool and SLOs it uses: the four suites of the
# benchmark protocol (docs/benchmarks.md), so a pool can be advised on the layout nearest its own.
SHIPPED: Final = {
    "mooncake": "mooncake",
    "azure-code": "azure",
    # Azure code on 4 x A100 + 4 x H100 serving Llama-2-7B (4k context).
    "azure-code-mixed": "hetero",
    # Mooncake on 4 prefill + 4 decode A100 pods in 2 regions of 2 racks.
    "mooncake-pd": "pd",
}

POOL_REPLAY: Final = "pool-replay"
MIN_PART_REQUESTS: Final = 20
"""Fewest requests per part of a replay: fewer, and one request's miss moves the attainment by
more than the differences the search ranks on."""


def workload_names() -> tuple[str, ...]:
    return (POOL_REPLAY, *SHIPPED)


def workload_titles() -> dict[str, str]:
    """Name -> what the console's workload choice says: the trace and the pool it runs on."""
    titles = {POOL_REPLAY: "this pool's own traffic (pool-replay)"}
    for name, suite_name in SHIPPED.items():
        suite = SUITES[suite_name]
        mix = Counter(parse_gpu_mix(suite.gpu, suite.pods))
        pods = " + ".join(f"{n} x {profile}" for profile, n in mix.items())
        layout = f", {suite.pd} prefill:decode" if suite.pd else ""
        titles[name] = f"shipped trace {name}: {suite.trace} on {pods}{layout}"
    return titles


def replay_parts(trace: Trace, parts: int, requests: int) -> tuple[Trace, ...]:
    """The newest ``parts * n`` requests cut into ``parts`` consecutive runs of ``n`` (``n``:
    ``requests``, or fewer so that all parts fit), each re-based to start at 0. Disjoint in
    time and oldest first: the tuning part is the earliest, the held-out parts the traffic that
    followed it (as the advice's pick would meet it)."""
    n = min(requests, len(trace) // parts)
    if n < MIN_PART_REQUESTS:
        raise ValueError(
            f"{len(trace)} requests: a replay needs {parts} parts of at least "
            f"{MIN_PART_REQUESTS} requests ({parts * MIN_PART_REQUESTS} requests)"
        )
    start = len(trace) - parts * n
    index = np.arange(len(trace))
    return tuple(
        trace.select((index >= start + i * n) & (index < start + (i + 1) * n)) for i in range(parts)
    )


NO_SLO: Final = "the pool's policy sets no default TTFT or TPOT SLO to measure attainment against"


def _too_little(requests: int, settings: CapacitySettings, budget: Budget) -> str | None:
    needed = (budget.seeds + 1) * MIN_PART_REQUESTS
    if requests >= needed:
        return None
    return (
        f"too little traffic to replay: {requests} requests (TTFT samples) in the last "
        f"{settings.desired_lookback_s:g} s, a replay needs {needed} "
        f"({budget.seeds + 1} parts of {MIN_PART_REQUESTS})"
    )


def replay_problem(
    session: Session, pool_id: int, settings: CapacitySettings, budget: Budget, now: datetime
) -> str | None:
    """Why the pool cannot be replayed now (None: it can). Counts, reads no rows: the console's
    Policies page asks on every view."""
    if policy_slo(spec_of(policy_for_pool(session, pool_id))) is None:
        return NO_SLO
    since = now - timedelta(seconds=settings.desired_lookback_s)
    return _too_little(count_recent(session, pool_id, since, TargetCode.TTFT), settings, budget)


# Measured (docs/benchmarks.md, "The advisor on the pool's own traffic"): one calibration of a
# 600-request Mooncake replay on 8 pods, 53 simulations, took 83.9 CPU s routed by a new pool's
# predicted chain against 11.8 routed by load+prefix 3:2:2.
LEARNING_COST: Final = "about 7 times the CPU of desired replicas' router"


def calibration_router(
    spec: PolicySpec, settings: CapacitySettings, requests: int, learning_max_requests: int
) -> tuple[CalibrationRouter, str | None]:
    """What routes the replay while the pod is calibrated: the pool's active policy (the router
    its samples were taken under), as the advisor runs it; desired replicas' router instead when
    the active policy is the predicted-latency chain and the replay has more than
    ``learning_max_requests`` requests. Also why it is not the active policy (None: it is).

    The load chains (``llm-d-default``, ``load-prefix``, ``lmetric``) decide with the library's
    cores and cost what desired replicas' router costs. The predicted-latency chain trains its
    predictor online in every simulation of the calibration (``LEARNING_COST``), and the
    calibration runs on the whole replay (up to ``desired_max_samples``), so past the bound it
    would take a large share of the advice's 15 minutes on one core."""
    if spec.chain == "predicted-latency" and requests > learning_max_requests:
        why = (
            f"the active predicted-latency chain learns online in the simulator "
            f"({LEARNING_COST}), and this replay's {requests} requests are more than the "
            f"{learning_max_requests} calibrated with it (learning_calibration_max_requests)"
        )
        return desired_router(settings), why
    # As the pool runs it: an EPP holds no decision, /v1/schedule does.
    policy, options = run_as("active", spec)
    if not options:
        # By name: the same key as desired replicas' when it is the same router (load+prefix
        # 3:2:2), so both share one calibration.
        return CalibrationRouter(policy, policy), None
    name = f"{policy}({', '.join(f'{k}={v}' for k, v in options)})"
    factory, opts = POLICIES[policy], dict(options)
    return CalibrationRouter(name, lambda fabric, seed: factory(fabric, seed, opts)), None


def pool_replay(
    session: Session,
    pool_id: int,
    budget: Budget,
    settings: CapacitySettings,
    now: datetime,
    learning_max_requests: int,
    progress: Callable[[float, str], None] = lambda fraction, message: None,
) -> Workload:
    """The pool's recent traffic as the advisor's workload: ``budget.seeds + 1`` parts on the
    calibrated pod, the policy's SLOs. ``Invalid`` when the pool cannot be replayed."""
    spec = spec_of(policy_for_pool(session, pool_id))
    slo = policy_slo(spec)
    if slo is None:
        raise Invalid(f"pool-replay: {NO_SLO}", field="workload")
    rows = recent_rows(session, pool_id, settings, now)
    session.rollback()  # no transaction held open across the simulations
    problem = _too_little(sum(r.target == "ttft" for r in rows), settings, budget)
    if problem is not None:
        raise Invalid(f"pool-replay: {problem}", field="workload")
    replay = build_workload(rows)
    try:  # before calibrating: the replay's cut is checked before its costly part
        replay_parts(replay.trace, budget.seeds + 1, budget.requests)
    except ValueError as exc:  # TTFT samples that rebuild fewer requests than counted
        raise Invalid(f"pool-replay: {exc}", field="workload") from exc
    router, fallback = calibration_router(spec, settings, len(replay.trace), learning_max_requests)
    progress(0.0, f"calibrating the simulated pod to the pool's latencies, routed by {router.name}")
    cal, reused = pool_calibration(pool_id, replay, slo, settings, router, pool_profiles(spec))
    workload = replay_workload(replay, cal, slo, budget, router.name, fallback)
    details = {
        **workload.details,
        "calibration": {**workload.details["calibration"], "reused": reused},
    }
    return dataclasses.replace(
        workload, details={**details, "lookback_s": settings.desired_lookback_s}
    )


def replay_workload(
    replay: SampleWorkload,
    cal: Calibration,
    slo: Slo,
    budget: Budget,
    routed_by: str,
    fallback: str | None = None,
) -> Workload:
    """A replay built from samples, on its calibrated pod, as the advisor's workload (pure: the
    service above and ``bench/advisor_replay.py`` share it). ``routed_by`` names the router the
    calibration ran, ``fallback`` why it is not the pool's active policy (None: it is).
    ``ValueError``: too few requests."""
    parts = replay_parts(replay.trace, budget.seeds + 1, budget.requests)
    pods = max(1, len(replay.pods))
    # A P/D pool's samples name its prefill endpoints: replayed on the same split, as the
    # calibration ran it (``fromsamples.calibrate``).
    split = f"{replay.prefill_pods}:{replay.decode_pods}" if replay.prefill_pods else None
    n = len(replay.trace)
    error = f"{cal.error:.3f}" if math.isfinite(cal.error) else "unknown"
    routing = (
        f"routed by the pool's active policy ({routed_by})"
        if fallback is None
        else f"routed by {routed_by}, not the pool's active policy: {fallback}"
    )
    return Workload(
        name=POOL_REPLAY,
        source="pool-replay",
        label=(
            f"this pool's own traffic: a replay of its last {n} requests "
            f"({replay.drawn_outputs} of {n} output lengths drawn, not paired), "
            f"{pods} pods seen{f' ({split} prefill:decode)' if split else ''}, "
            f"simulated as {cal.pod.profile} (prefill x"
            f"{cal.pod.prefill_scale:.2f}, decode x{cal.pod.decode_scale:.2f}) "
            f"(calibration error {error}, {routing}), at the recorded rate"
        ),
        parts=parts,
        pool=build_pool(pods, cal.pod.profile, split),
        slo=slo,
        load=1.0,
        # The calibrated pod: the prefill and decode shares of every iteration's cost scaled;
        # arrivals from samples are exact.
        sim_options={
            "prefill_scale": cal.pod.prefill_scale,
            "decode_scale": cal.pod.decode_scale,
            "spread_ties": False,
        },
        details={
            **replay.summary(),
            "calibration": {
                **cal.summary(),
                "router": routed_by,
                "router_is_active_policy": fallback is None,
                "router_fallback": fallback,
            },
        },
    )


def shipped_trace(name: str, budget: Budget, active: PolicySpec) -> Workload:
    """``budget.seeds + 1`` disjoint slices of ``budget.requests`` requests of the trace: the
    first to tune on, the others held out. SLOs: the pool's defaults, else the suite's."""
    suite = dataclasses.replace(SUITES[SHIPPED[name]], slice_requests=budget.requests)
    load = suite.tuning_loads[-1]
    parts = tuple(
        arrivals(Job(suite, i, budget.requests, load, "", (), 0, ()))
        for i in range(budget.seeds + 1)
    )
    slo = Slo(
        active.default_ttft_slo_ms or suite.ttft_slo_ms,
        active.default_tpot_slo_ms or suite.tpot_slo_ms,
    )
    pool = tuple(build_pool(suite.pods, suite.gpu, suite.pd, suite.layout))
    return Workload(
        name=name,
        source="shipped-trace",
        label=(
            f"shipped trace {suite.trace} (not this pool's own traffic), "
            f"{suite.pods} simulated {suite.gpu} pods, "
            f"load {load:g}"
        ),
        parts=parts,
        pool=pool,
        slo=slo,
        load=load,
    )
