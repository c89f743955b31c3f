"""The pool replay cut into the advisor's parts: disjoint in time, the newest traffic, oldest
part first (the tuning part), each re-based; too little traffic refused."""

from __future__ import annotations

import dataclasses
import functools
import threading

import numpy as np
import pytest

from backend.advisor.search import Budget, candidates
from backend.advisor.workloads import (
    MIN_PART_REQUESTS,
    calibration_router,
    replay_parts,
    replay_workload,
)
from backend.policies.schemas import PolicySpec
from backend.scheduling.types import TransferConfig
from backend.settings import CapacitySettings
from backend.sim.fromsamples import (
    CALIBRATION_STEPS,
    Calibration,
    PodModel,
    build_workload,
    calibrate,
    record,
    rows_from_observations,
)
from backend.sim.protocol import SUITES, Job, arrivals, figures, simulate_trace
from backend.sim.routers import OURS, POLICIES
from backend.sim.routers.base import RoutingPolicy
from backend.sim.routers.heuristic import StickyUntilSaturated
from backend.sim.traces import load_trace
from backend.sim.view import Slo


def test_parts_are_consecutive_disjoint_and_the_newest_traffic() -> None:
    trace = load_trace("azure-code").head(250)
    parts = replay_parts(trace, 3, 60)
    assert [len(p) for p in parts] == [60, 60, 60]
    # The last 180 requests, in order: part i holds requests 70 + 60 i .. 70 + 60 i + 59.
    for i, part in enumerate(parts):
        lo = 70 + 60 * i
        assert np.array_equal(part.input_tokens, trace.input_tokens[lo : lo + 60])
        assert part.arrival_s[0] == 0.0
        gaps = np.diff(trace.arrival_s[lo : lo + 60])
        assert np.allclose(np.diff(part.arrival_s), gaps)
        assert part.units(0) == trace.units(lo)


def test_fewer_requests_shrink_the_parts_until_too_few() -> None:
    trace = load_trace("azure-code").head(100)
    assert [len(p) for p in replay_parts(trace, 3, 1000)] == [33, 33, 33]
    with pytest.raises(ValueError, match="at least 20 requests"):
        replay_parts(trace.head(3 * MIN_PART_REQUESTS - 1), 3, 1000)


def test_a_replay_of_a_simulated_pool_runs_every_part_to_its_end() -> None:
    """The replay of a simulated Mooncake pool, as ``pool-replay`` builds it, on every part with
    a packing candidate: its held-out part 2 once left requests in flight with no event, and a
    learning policy's run ticked on forever (the advice never finished)."""
    budget = Budget(100, 2, 1, 1)
    suite = dataclasses.replace(SUITES["mooncake"], slice_requests=300)
    original = arrivals(Job(suite, 0, 300, 1.0, "", (), 0, ()))
    slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
    _, observations = record(original, suite.pods, suite.gpu, OURS, slo)
    replay = build_workload(rows_from_observations(observations))
    cal = calibrate(replay, "llm-d-322", slo, steps=CALIBRATION_STEPS)
    workload = replay_workload(replay, cal, slo, budget, "llm-d-322", "recorded by another")
    assert workload.source == "pool-replay" and len(workload.pool) == suite.pods
    assert workload.label.startswith("this pool's own traffic")
    assert "routed by llm-d-322, not the pool's active policy: recorded by another" in (
        workload.label
    )
    assert workload.details["calibration"]["router"] == "llm-d-322"
    assert workload.details["calibration"]["router_is_active_policy"] is False
    # The calibrated pod's two factors, each where it belongs.
    assert workload.sim_options["prefill_scale"] == cal.pod.prefill_scale
    assert workload.sim_options["decode_scale"] == cal.pod.decode_scale
    most = next(
        c for c in candidates(PolicySpec()) if "most, TTFT/TPOT 1/0, affinity as" in c.label
    )
    finished: list[float] = []

    def route(transfer: TransferConfig, seed: int) -> RoutingPolicy:
        return POLICIES[most.policy](transfer, seed, dict(most.options))

    def run_all() -> None:
        for part, seed in ((1, 0), (2, 1)):
            result = simulate_trace(
                workload.parts[part],
                list(workload.pool),
                slo,
                functools.partial(route, seed=seed),
                seed,
                workload.sim_options,
            )
            finished.append(figures(result, slo)["slo_attainment"])

    # A thread, so that a run that never ends fails the test instead of hanging it.
    thread = threading.Thread(target=run_all, daemon=True)
    thread.start()
    thread.join(120)
    assert len(finished) == 2 and all(0.0 <= a <= 1.0 for a in finished)


def test_the_replay_is_calibrated_with_the_active_policy_within_its_cost() -> None:
    settings = CapacitySettings()
    # A new pool's predicted chain, run as the advisor runs it, on a replay within the bound.
    router, why = calibration_router(PolicySpec(), settings, 1500, 1500)
    assert why is None and router.name.startswith("headroom(mode=slo, strategy=most,")
    assert "picker=weighted_random" in router.name and callable(router.route)
    # Past it, desired replicas' router, saying why.
    router, why = calibration_router(PolicySpec(), settings, 1501, 1500)
    assert (router.name, router.route) == ("llm-d-322", "llm-d-322")
    assert why is not None and "1501 requests are more than the 1500" in why
    sticky = PolicySpec(chain="llm-d-default", sticky_affinity_threshold=0.5)
    router, why = calibration_router(sticky, settings, 10**6, 0)  # a load chain: any size
    assert why is None and router.name == "llm-d-default(affinity_threshold=0.5)"
    assert callable(router.route)
    policy = router.route(TransferConfig(), 0)
    assert isinstance(policy, StickyUntilSaturated) and policy.affinity_threshold == 0.5
    # Load+prefix 3:2:2 is desired replicas' own router: one name, so one cached calibration.
    router, why = calibration_router(PolicySpec(chain="load-prefix"), settings, 100, 0)
    assert (router.name, why) == (settings.desired_router, None)
    lmetric = PolicySpec(chain="lmetric", lmetric_pending=False)
    router, why = calibration_router(lmetric, settings, 100, 0)
    assert why is None and router.name == "lmetric(pending=False)"


def test_a_pd_pools_replay_keeps_its_split() -> None:
    """Samples naming prefill endpoints replay on a P/D pool of the same split, as the
    calibration simulated them (``fromsamples.calibrate``), and the label says so."""
    slo = Slo(2000.0, 100.0)
    trace = load_trace("azure-code").scaled(3.0).window(0.0, 60.0)
    _, observations = record(trace, 4, "a100-llama3-8b", "least-request", slo, pd="3:1")
    replay = build_workload(rows_from_observations(observations))
    cal = Calibration(PodModel("a100-llama3-8b"), 0.1, 0.1, 0.1)
    workload = replay_workload(replay, cal, slo, Budget(100, 2, 1, 1), "llm-d-322")
    assert sorted(p.role for p in workload.pool) == ["decode", "prefill", "prefill", "prefill"]
    assert "4 pods seen (3:1 prefill:decode)" in workload.label
