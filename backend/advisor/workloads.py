"""Where the advisor's workload comes from.

Two sources, one interface (:class:`backend.advisor.search.Workload`):

* ``shipped-trace``: a trace shipped with the simulator (Mooncake conversation, Azure code) cut
  into the benchmark protocol's disjoint slices on its suite's pool, at the suite's higher tuning
  load (where routing decisions matter). It is *not* the pool's own traffic, and the result says
  so.
* ``pool-replay``: the pool's own traffic rebuilt from its samples, on a pod calibrated to it.
  That replay is being built separately; until it is merged, :data:`POOL_REPLAY` is None and
  only the shipped traces are offered. THE SEAM: set ``POOL_REPLAY`` to a function
  ``(session, pool_id, budget) -> Workload`` and register it in :data:`SOURCES`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from backend.advisor.search import Budget, Workload
from backend.policies.schemas import PolicySpec
from backend.sim.pool import build_pool
from backend.sim.protocol import SUITES, Job, arrivals
from backend.sim.view import Slo

# Workload name -> the protocol suite whose trace, pool and SLOs it uses.
SHIPPED: Final = {"mooncake": "mooncake", "azure-code": "azure"}

PoolReplay = Callable[[Any, int, Budget], Workload]
POOL_REPLAY: PoolReplay | None = None
"""The pool-replay source once it exists (see the module's docstring)."""


def workload_names() -> tuple[str, ...]:
    return (*SHIPPED, *(("pool-replay",) if POOL_REPLAY is not None else ()))


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
            f"shipped trace {suite.trace} (not this pool's own traffic: the replay of the "
            f"pool's samples is not available yet), {suite.pods} simulated {suite.gpu} pods, "
            f"load {load:g}"
        ),
        parts=parts,
        pool=pool,
        slo=slo,
        load=load,
    )
