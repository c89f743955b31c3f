"""The routing benchmark protocol: options tuned on one slice, figures from disjoint slices.

For one suite (trace, pool, SLO, loads, policies):

1. **Tuning.** Every policy with options (``routers.TUNABLE``: Headroom's and the peers' alike)
   runs each combination on the *tuning slice* (the trace's first ``slice_requests`` requests)
   at the suite's tuning loads, first seed; the combination with the highest mean SLO
   attainment is kept (the default wins ties). No other slice informs any choice.
2. **Evaluation.** Replicate ``i`` replays evaluation slice ``i`` (the next disjoint blocks of
   ``slice_requests`` requests) with seed ``seeds[i]``, so the spread covers both the traffic
   and the simulator's randomness (scrape phases, tie-breaks, predictor seeds). Each figure is
   reported as mean and min-max over the replicates.
3. **SLO capacity.** Per policy and replicate, the highest load at which at least
   ``capacity_target`` of the requests meet both SLOs: bracketed by the evaluation loads, then
   bisected ``capacity_steps`` times. Reported with the output tokens per second of the
   requests that met their SLO.

A policy is called best at a load only when its lead in mean attainment over the runner-up
exceeds the larger of the two policies' min-max spreads; otherwise the leaders are a tie.

Every run is a pure function of its ``Job`` (slice, load, policy, options, seed, simulator
options), so identical jobs are run once: the capacity brackets reuse the evaluation runs, a
bisection midpoint that was already run is not run again, and the trace is read and its slices
cut once per process. Independent
jobs run in parallel worker processes. ``sim`` passes simulator options (``SimConfig`` fields,
e.g. a step-cost scale or arrival spreading, where the simulator has them) through unchanged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation, max_context
from backend.sim.gpu import load_profile
from backend.sim.pool import PodSpec, build_pool
from backend.sim.report import summarize
from backend.sim.routers import (
    LLMD_DEFAULT,
    LLMD_PREDICTED,
    LLMD_PREDICTED_BEST,
    LLMD_ROUTING,
    MAIN_POLICIES,
    OURS,
    OURS_GREEDY_PD,
    POLICIES,
    REFERENCE,
    make_policy,
    variants,
)
from backend.sim.routers.base import RoutingPolicy
from backend.sim.traces.loader import TRACE_NAMES, TenantModel, Trace, load_trace
from backend.sim.view import Slo

LoadBasis = Literal["trace", "slice"]
STEP_COST_SCALES: Final = ("decode_scale", "prefill_scale")
"""The simulator options a step-cost sensitivity run sets together (``--step-cost-scale``);
``--sim decode_scale=X`` or ``prefill_scale=X`` scales one share alone."""
HEADLINE_PEERS: Final = (LLMD_PREDICTED_BEST, LLMD_DEFAULT, "lmetric")
"""The peers Headroom's default policy is checked against in the headline."""
FIGURES: Final = ("slo_attainment", "ttft_p50_ms", "ttft_p90_ms", "tpot_p90_ms", "slo_tokens_s")
_SIM_FIXED: Final = frozenset({"slo", "seed", "transfer"})
PROTOCOL_POLICIES: Final = tuple(p for p in MAIN_POLICIES if p != LLMD_ROUTING)
"""Every policy but llm-d's routing-only mode (no SLO headers: upstream's published benchmark
setting, not a configuration a pool with SLOs would run); pass it by name to include it."""


@dataclass(frozen=True)
class Suite:
    name: str
    trace: str
    gpu: str
    loads: tuple[float, ...]
    """Evaluation loads (x the slice's recorded rate), comfortable to saturated."""
    tuning_loads: tuple[float, ...]
    """Where options are chosen: around the pool's SLO capacity."""
    ttft_slo_ms: float
    tpot_slo_ms: float
    slice_requests: int
    policies: tuple[str, ...] = PROTOCOL_POLICIES
    pods: int = 8
    pd: str | None = None
    layout: str = "rack"
    max_model_len: int | None = None
    tenants: int = 32
    capacity_target: float = 0.9
    """Share of requests within SLO that defines the SLO capacity."""


# On the Mooncake conversation trace 90 % is out of reach at any load: at 0.05 x its rate
# Headroom meets 82 % and least-request 75.5 % of the SLO (first evaluation slice), because
# the longest prompts cannot prefill within 2 s on an A100 even alone. Its capacity is
# measured at 75 % instead, and says so.
MOONCAKE_CAPACITY_TARGET: Final = 0.75

PD_POLICIES: Final = (
    "round-robin",
    "least-request",
    "dynamo-kv",
    "sglang-cache-aware",
    LLMD_DEFAULT,
    "lmetric",
    LLMD_PREDICTED,
    LLMD_PREDICTED_BEST,
    OURS_GREEDY_PD,
    OURS,
    REFERENCE,
)

MOONCAKE: Final = Suite(
    name="mooncake",
    trace="mooncake-conversation",
    gpu="a100-llama3-8b",
    loads=(0.5, 0.75, 1.0, 1.25),
    tuning_loads=(0.75, 1.0),
    ttft_slo_ms=2000.0,
    tpot_slo_ms=100.0,
    slice_requests=3000,
    capacity_target=MOONCAKE_CAPACITY_TARGET,
)
AZURE: Final = Suite(
    name="azure",
    trace="azure-code",
    gpu="a100-llama3-8b",
    loads=(1.0, 2.0, 3.0, 4.0, 5.0),
    tuning_loads=(3.0, 4.0),
    ttft_slo_ms=1000.0,
    tpot_slo_ms=100.0,
    slice_requests=2000,
)
SUITES: Final[dict[str, Suite]] = {
    "mooncake": MOONCAKE,
    "azure": AZURE,
    # Mooncake on 4 prefill + 4 decode pods in 2 regions of 2 racks.
    "pd": dataclasses.replace(
        MOONCAKE,
        name="pd",
        pd="4:4",
        layout="regions:2,racks:2",
        loads=(0.3, 0.5, 0.7),
        tuning_loads=(0.5,),
        policies=PD_POLICIES,
    ),
    # Azure code on 4 x A100 + 4 x H100 serving Llama-2-7B (4k context).
    "hetero": dataclasses.replace(
        AZURE,
        name="hetero",
        gpu="a100-llama2-7b:4,h100-llama2-7b:4",
        loads=(4.0, 8.0, 12.0, 16.0),
        tuning_loads=(8.0, 12.0),
        max_model_len=4096,
    ),
}


@dataclass(frozen=True)
class ProtocolConfig:
    suite: Suite
    seeds: tuple[int, ...] = (0, 1, 2)
    slice_requests: int | None = None
    """Requests per slice (default: the suite's)."""
    loads: tuple[float, ...] | None = None
    policies: tuple[str, ...] | None = None
    tune: bool = True
    capacity_steps: int = 3
    capacity_target: float | None = None
    """Default: the suite's."""
    workers: int = 2
    sim: Mapping[str, Any] = field(default_factory=dict)
    load_basis: LoadBasis = "trace"
    """What load 1 means for a slice: the whole trace's mean rate (default) or its own."""
    cache: Path | None = None
    """Where every simulation's result is kept and reused from (``Runner``); None: nowhere."""

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("at least one seed is needed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("seeds must differ")
        if self.slice_requests is not None and self.slice_requests < 10:
            raise ValueError("slice_requests must be at least 10")
        if self.loads is not None and (not self.loads or any(not x > 0 for x in self.loads)):
            raise ValueError("loads must be positive numbers")
        unknown = [p for p in self.policies or () if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; available: {', '.join(POLICIES)}")
        if self.policies is not None and not self.policies:
            raise ValueError("no policies to run")
        if self.capacity_steps < 0 or not 0.0 < self.target <= 1.0:
            raise ValueError("capacity_steps must be >= 0 and capacity_target in (0, 1]")
        if self.workers < 1:
            raise ValueError("workers must be >= 1")
        if self.load_basis not in ("trace", "slice"):
            raise ValueError("load_basis must be 'trace' or 'slice'")
        known = {f.name for f in dataclasses.fields(SimConfig)} - _SIM_FIXED
        bad = sorted(set(self.sim) - known)
        if bad:
            raise ValueError(
                f"unknown simulator option(s) {bad}; this simulator's options: "
                + ", ".join(sorted(known))
            )

    @property
    def target(self) -> float:
        return self.suite.capacity_target if self.capacity_target is None else self.capacity_target

    @property
    def n(self) -> int:
        return self.slice_requests or self.suite.slice_requests

    @property
    def run_loads(self) -> tuple[float, ...]:
        return tuple(sorted(self.loads or self.suite.loads))

    @property
    def run_policies(self) -> tuple[str, ...]:
        return self.policies or self.suite.policies


@dataclass(frozen=True)
class Job:
    """One simulation: everything its result depends on (and so the key it is reused by)."""

    suite: Suite
    slice_index: int  # 0 = the tuning slice
    n: int
    load: float
    policy: str
    options: tuple[tuple[str, Any], ...]
    seed: int
    sim: tuple[tuple[str, Any], ...]
    load_basis: LoadBasis = "trace"


@lru_cache(maxsize=8)
def _pool(suite: Suite) -> tuple[PodSpec, ...]:
    return tuple(build_pool(suite.pods, suite.gpu, suite.pd, suite.layout))


@lru_cache(maxsize=8)
def _full(suite: Suite) -> Trace:
    tenants = TenantModel(tenants=suite.tenants)
    return load_trace(suite.trace, tenants if suite.trace.startswith("azure") else None)


@lru_cache(maxsize=32)
def _slice(suite: Suite, index: int, n: int) -> Trace:
    """Requests ``[index * n, (index + 1) * n)`` of the suite's trace, fitted to the pool."""
    trace = _full(suite)
    mask = np.zeros(len(trace), dtype=np.bool_)
    mask[index * n : (index + 1) * n] = True
    limit = max_context(list(_pool(suite)))
    if suite.max_model_len is not None:
        limit = min(limit, suite.max_model_len)
    return trace.select(mask).clipped(limit)


def _trace_rate(suite: Suite) -> float:
    trace = _full(suite)
    return len(trace) / trace.duration_s


def arrivals(job: Job) -> Trace:
    """The job's slice at its load. On the ``trace`` basis load 1 is the whole trace's mean rate
    for every slice (a slice's own rate varies: 1.9 to 4.2 requests/s across Azure code's
    1,000-request slices), so replicates differ in their traffic's shape, not its volume; on the
    ``slice`` basis load 1 is each slice's own recorded rate."""
    part = _slice(job.suite, job.slice_index, job.n)
    if job.load_basis == "slice" or len(part) < 2 or part.duration_s <= 0:
        return part.scaled(job.load)
    return part.scaled(job.load * _trace_rate(job.suite) / (len(part) / part.duration_s))


def trace_length(suite: Suite) -> int:
    return len(_full(suite))


def simulate_trace(
    trace: Trace,
    pool: list[PodSpec],
    slo: Slo,
    policy_of: Callable[[TransferConfig], RoutingPolicy],
    seed: int,
    sim_options: Mapping[str, Any] | None = None,
) -> SimResult:
    """One simulation of ``trace`` on ``pool`` with the policy ``policy_of`` builds for the pool's
    model (the protocol's jobs, and the advisor's on any workload)."""
    transfer = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    sim = Simulation(
        trace,
        pool,
        policy_of(transfer),
        SimConfig(slo, seed=seed, transfer=transfer, **dict(sim_options or {})),
    )
    return sim.run()


def simulate(job: Job) -> SimResult:
    """Run one simulation: the job's slice, pool, policy, seed and simulator options."""
    return simulate_trace(
        arrivals(job),
        list(_pool(job.suite)),
        Slo(job.suite.ttft_slo_ms, job.suite.tpot_slo_ms),
        lambda transfer: make_policy(job.policy, transfer, job.seed, dict(job.options)),
        job.seed,
        dict(job.sim),
    )


def figures(result: SimResult, slo: Slo) -> dict[str, Any]:
    """The per-run figures the protocol aggregates (and the advisor ranks by)."""
    r = summarize(result, slo)
    return {
        "slo_attainment": r["slo_attainment"],
        "ttft_p50_ms": r["ttft_ms"]["p50"],
        "ttft_p90_ms": r["ttft_ms"]["p90"],
        "tpot_p90_ms": r["tpot_ms"]["p90"],
        "slo_tokens_s": r["slo_output_tokens_per_s"],
        "requests": r["requests"],
        "shed": r["shed"],
        "prefix_hit_rate": r["prefix_hit_rate"],
        "predictor_live_mape": r["predictor_live_mape"],
        "wall_s": r["wall_s"],
    }


def run_job(job: Job) -> dict[str, Any]:
    """Run one simulation; the per-run figures the protocol aggregates, with the CPU seconds
    it took (wall seconds stretch when other work shares the machine; CPU seconds do not)."""
    cpu = time.process_time()
    out = figures(simulate(job), Slo(job.suite.ttft_slo_ms, job.suite.tpot_slo_ms))
    out["cpu_s"] = round(time.process_time() - cpu, 2)
    return out


# What a cached result depends on besides its Job: the simulator, the policies, the predictor
# and the scheduling library it runs, and the traces and GPU profiles they read.
_CODE_DIRS: Final = ("sim", "predictor", "scheduling")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A digest of every file a simulation's result can depend on (source and data)."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for top in _CODE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(root)).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def job_key(job: Job) -> str:
    """A stable name for a job's result on disk: the job's fields and the code fingerprint."""
    text = json.dumps([asdict(job), code_fingerprint()], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Runner:
    """Runs jobs once each, in parallel worker processes, remembering every result.

    With a ``cache`` directory every result is also written there as it completes, named by
    ``job_key`` (the job and the code fingerprint), and read back instead of rerun: a run that
    was stopped resumes where it was, and another invocation that needs the same simulation
    (a sensitivity rerun's 1.0x point, a capacity-only rerun) does not repeat it. A change to
    the simulator, the policies, the predictor or the traces changes every key."""

    def __init__(self, workers: int, log: Log = _stderr, cache: Path | None = None) -> None:
        self.workers = workers
        self.results: dict[Job, dict[str, Any]] = {}
        self.loaded: set[Job] = set()
        self.requested = 0
        self.log = log
        self.cache = cache
        if cache is not None:
            cache.mkdir(parents=True, exist_ok=True)
        self._executor = ProcessPoolExecutor(workers) if workers > 1 else None

    def _load(self, job: Job) -> bool:
        if self.cache is None:
            return False
        path = self.cache / f"{job_key(job)}.json"
        try:
            self.results[job] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False  # absent, or a file cut short by a stop: run it again
        self.loaded.add(job)
        return True

    def _store(self, job: Job, out: Mapping[str, Any]) -> None:
        if self.cache is None:
            return
        path = self.cache / f"{job_key(job)}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(out), encoding="utf-8")
        tmp.replace(path)  # atomic: a reader never sees half a result

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown()

    def run(self, jobs: Sequence[Job]) -> list[dict[str, Any]]:
        self.requested += len(jobs)
        todo = [j for j in dict.fromkeys(jobs) if j not in self.results and not self._load(j)]
        outputs: Iterable[dict[str, Any]] = (
            self._executor.map(run_job, todo)
            if self._executor is not None
            else (run_job(j) for j in todo)
        )
        for job, out in zip(todo, outputs, strict=True):
            self.results[job] = out
            self._store(job, out)
            opts = ",".join(f"{k}={v}" for k, v in job.options)
            self.log(
                f"[{job.suite.name}] slice {job.slice_index} seed {job.seed} load {job.load:g} "
                f"{job.policy}{f' ({opts})' if opts else ''}: SLO met {out['slo_attainment']}, "
                f"{out['wall_s']} s"
            )
        return [self.results[j] for j in jobs]


def _stats(values: Sequence[float | None]) -> dict[str, float | None]:
    v = [x for x in values if x is not None and math.isfinite(x)]
    if not v:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(float(np.mean(v)), 4), "min": min(v), "max": max(v)}


def _spread(s: Mapping[str, float | None]) -> float:
    lo, hi = s["min"], s["max"]
    return 0.0 if lo is None or hi is None else hi - lo


def compare(a: Mapping[str, float | None], b: Mapping[str, float | None]) -> str:
    """``a`` against ``b`` (higher is better): a lead counts only beyond both spreads."""
    if a["mean"] is None or b["mean"] is None:
        return "n/a"
    lead = a["mean"] - b["mean"]
    spread = max(_spread(a), _spread(b))
    if lead > spread:
        return "wins"
    if -lead > spread:
        return "loses"
    return "within spread"


def _tune(
    config: ProtocolConfig, runner: Runner, sim: tuple[tuple[str, Any], ...]
) -> dict[str, Any]:
    """Each policy's option combination with the best mean attainment on the tuning slice."""
    grid = {
        p: [
            (o, [_tuning_job(config, p, o, load, sim) for load in config.suite.tuning_loads])
            for o in (variants(p) if config.tune else [{}])
        ]
        for p in config.run_policies
    }
    # One batch for every policy, so the workers stay busy across policies.
    runner.run([j for p in grid if len(grid[p]) > 1 for _, jobs in grid[p] for j in jobs])
    chosen: dict[str, Any] = {}
    for policy, combos in grid.items():
        if len(combos) == 1:
            chosen[policy] = {"options": {}, "tried": []}
            continue
        tried = [
            {
                "options": o,
                "slo_attainment": round(
                    float(np.mean([runner.results[j]["slo_attainment"] for j in jobs])), 4
                ),
            }
            for o, jobs in combos
        ]
        best = max(range(len(tried)), key=lambda i: (tried[i]["slo_attainment"], -i))
        chosen[policy] = {"options": tried[best]["options"], "tried": tried}
    return chosen


def _tuning_job(
    config: ProtocolConfig,
    policy: str,
    options: Mapping[str, Any],
    load: float,
    sim: tuple[tuple[str, Any], ...],
) -> Job:
    opts = tuple(options.items())
    return Job(
        config.suite, 0, config.n, load, policy, opts, config.seeds[0], sim, config.load_basis
    )


def _capacity(
    config: ProtocolConfig,
    runner: Runner,
    eval_job: Callable[[str, float, int], Job],
) -> dict[str, dict[str, Any]]:
    """Per policy and replicate: the highest load known to keep ``capacity_target`` of requests
    within SLO, bracketed by the evaluation loads, then bisected."""
    target, loads = config.target, config.run_loads
    keys = [(p, r) for p in config.run_policies for r in range(len(config.seeds))]
    # The evaluation runs bracket each capacity (requested again: the runner hands them back).
    grid = runner.run([eval_job(p, load, r) for p, r in keys for load in loads])
    brackets: dict[tuple[str, int], list[float]] = {}
    for i, key in enumerate(keys):
        lo, hi = 0.0, math.inf
        for load, out in zip(loads, grid[i * len(loads) : (i + 1) * len(loads)], strict=True):
            if out["slo_attainment"] >= target:
                lo = load
            else:
                hi = load
                break
        brackets[key] = [lo, hi]
    # Every evaluation load passed: probe twice the highest once; if that passes too, the
    # capacity is reported as at least that load (censored).
    open_ended = [k for k, (lo, hi) in brackets.items() if math.isinf(hi)]
    if config.capacity_steps and open_ended:
        probes = [eval_job(p, 2 * loads[-1], r) for p, r in open_ended]
        for (p, r), out in zip(open_ended, runner.run(probes), strict=True):
            if out["slo_attainment"] >= target:
                brackets[(p, r)][0] = 2 * loads[-1]
            else:
                brackets[(p, r)][1] = 2 * loads[-1]
    for _ in range(config.capacity_steps):
        live = [k for k, (lo, hi) in brackets.items() if math.isfinite(hi)]
        mids = {k: round((brackets[k][0] + brackets[k][1]) / 2, 4) for k in live}
        outs = runner.run([eval_job(p, mids[(p, r)], r) for p, r in live])
        for k, out in zip(live, outs, strict=True):
            brackets[k][0 if out["slo_attainment"] >= target else 1] = mids[k]
    capacity: dict[str, dict[str, Any]] = {}
    for policy in config.run_policies:
        per = [brackets[(policy, r)] for r in range(len(config.seeds))]
        tokens = []
        for r, (lo, _) in enumerate(per):
            tokens.append(runner.results[eval_job(policy, lo, r)]["slo_tokens_s"] if lo else 0.0)
        capacity[policy] = {
            "load": _stats([lo for lo, _ in per]),
            "slo_tokens_s_at_capacity": _stats(tokens),
            "censored": any(math.isinf(hi) for _, hi in per),
            "brackets": [[lo, None if math.isinf(hi) else hi] for lo, hi in per],
        }
    return capacity


def run_protocol(
    config: ProtocolConfig,
    log: Log = _stderr,
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Tune, evaluate and measure capacity for one suite; plain JSON types. ``checkpoint`` gets
    the figures without the capacity as soon as the evaluation is done (a long run that is
    stopped during the bisection keeps them)."""
    suite, n = config.suite, config.n
    if suite.trace not in TRACE_NAMES:
        raise ValueError(f"unknown trace {suite.trace!r}")
    replicates = len(config.seeds)
    available = trace_length(suite)
    if (1 + replicates) * n > available:
        raise ValueError(
            f"{suite.trace} has {available} requests: too few for a tuning slice and "
            f"{replicates} evaluation slices of {n}; lower slice_requests or the seed count"
        )
    sim = tuple(sorted(config.sim.items()))
    marks = {"started": time.perf_counter()}
    runner = Runner(config.workers, log, config.cache)
    tuning: dict[str, Any] = {}

    def eval_job(policy: str, load: float, r: int) -> Job:
        options = tuple(tuning[policy]["options"].items())
        return Job(suite, 1 + r, n, load, policy, options, config.seeds[r], sim, config.load_basis)

    def assemble(capacity: dict[str, dict[str, Any]]) -> dict[str, Any]:
        rows = []
        for load in config.run_loads:
            for p in config.run_policies:
                runs = [runner.results[eval_job(p, load, r)] for r in range(replicates)]
                rows.append(
                    {
                        "load": load,
                        "policy": p,
                        "options": tuning[p]["options"],
                        **{f: _stats([x[f] for x in runs]) for f in FIGURES},
                        "runs": runs,
                    }
                )
        return {
            "protocol": _describe(config, tuning),
            "tuning": tuning,
            "results": rows,
            "capacity": capacity,
            "verdicts": verdicts(rows),
            "headline": headline(rows, capacity),
            "timing": _timing(config, runner, marks),
            "machine": machine(),
        }

    try:
        tuning.update(_tune(config, runner, sim))
        marks["tuned"] = time.perf_counter()
        runner.run(
            [
                eval_job(p, load, r)
                for load in config.run_loads
                for p in config.run_policies
                for r in range(replicates)
            ]
        )
        marks["evaluated"] = time.perf_counter()
        if checkpoint is not None:
            checkpoint(assemble({}))
        capacity = _capacity(config, runner, eval_job)
    finally:
        runner.close()
    marks["finished"] = time.perf_counter()
    return assemble(capacity)


def _describe(config: ProtocolConfig, tuning: Mapping[str, Any]) -> dict[str, Any]:
    n = config.n
    return {
        "suite": asdict(config.suite),
        "seeds": list(config.seeds),
        "slice_requests": n,
        "tuning_slice": f"requests 0-{n - 1}",
        "evaluation_slices": [
            f"requests {(1 + r) * n}-{(2 + r) * n - 1} with seed {s}"
            for r, s in enumerate(config.seeds)
        ],
        "loads": list(config.run_loads),
        "load_basis": config.load_basis,
        "tuning_loads": list(config.suite.tuning_loads),
        "capacity_target": config.target,
        "capacity_steps": config.capacity_steps,
        "sim_options": dict(config.sim),
        "policies": {
            p: make_policy(p, TransferConfig(), 0, tuning[p]["options"]).reproduces
            for p in config.run_policies
        },
    }


def _timing(config: ProtocolConfig, runner: Runner, marks: Mapping[str, float]) -> dict[str, Any]:
    now = marks.get("finished", time.perf_counter())

    def span(a: str, b: str) -> float | None:
        return round(marks[b] - marks[a], 1) if a in marks and b in marks else None

    return {
        "wall_s": round(now - marks["started"], 1),
        "tuning_wall_s": span("started", "tuned"),
        "evaluation_wall_s": span("tuned", "evaluated"),
        "capacity_wall_s": span("evaluated", "finished"),
        "simulations": len(runner.results),
        "simulations_from_cache": len(runner.loaded),
        "simulation_s_total": round(sum(r["wall_s"] for r in runner.results.values()), 1),
        # CPU seconds of the simulations run by this invocation (files from before the field
        # lack it): the machine-independent share of the wall time.
        "simulation_cpu_s": round(
            sum(r.get("cpu_s", 0.0) for j, r in runner.results.items() if j not in runner.loaded),
            1,
        ),
        "requested_runs": runner.requested,
        "reused_runs": runner.requested - len(runner.results),
        "workers": config.workers,
    }


def verdicts(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per load: the leader by mean SLO attainment, and whether its lead beats the spread."""
    out = []
    for load in sorted({r["load"] for r in rows}):
        at = sorted(
            (r for r in rows if r["load"] == load and r["policy"] != REFERENCE),
            key=lambda r: -(r["slo_attainment"]["mean"] or 0.0),
        )
        top = at[0]
        tied = [
            r["policy"]
            for r in at[1:]
            if compare(top["slo_attainment"], r["slo_attainment"]) != "wins"
        ]
        out.append(
            {
                "load": load,
                "leader": top["policy"],
                "best": top["policy"] if not tied else None,
                "tied_with_leader": tied,
            }
        )
    return out


def headline(
    rows: Sequence[Mapping[str, Any]], capacity: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Headroom's default policy against llm-d's chain at its best, llm-d's default, LMetric."""
    out = []
    by = {(r["load"], r["policy"]): r for r in rows}
    policies = {r["policy"] for r in rows}
    for peer in HEADLINE_PEERS:
        if OURS not in policies or peer not in policies:
            continue
        per_load = []
        for load in sorted({r["load"] for r in rows}):
            a, b = by[(load, OURS)], by[(load, peer)]
            # Both ran on the same slices with the same seeds: the per-slice difference is the
            # sharper test (the spread across slices is mostly the slices' own traffic).
            diffs = [
                x["slo_attainment"] - y["slo_attainment"]
                for x, y in zip(a["runs"], b["runs"], strict=True)
            ]
            paired = _stats(diffs)
            per_load.append(
                {
                    "load": load,
                    "headroom": a["slo_attainment"],
                    "peer": b["slo_attainment"],
                    "verdict": compare(a["slo_attainment"], b["slo_attainment"]),
                    "paired_difference": paired,
                    "paired_verdict": "ahead on every slice"
                    if (paired["min"] or 0.0) > 0
                    else "behind on every slice"
                    if (paired["max"] or 0.0) < 0
                    else "mixed",
                }
            )
        out.append(
            {
                "peer": peer,
                "slo_attainment": per_load,
                "capacity": compare(capacity[OURS]["load"], capacity[peer]["load"])
                if OURS in capacity and peer in capacity
                else "n/a",
            }
        )
    return out


def machine() -> dict[str, Any]:
    """What ran the benchmark (wall-clock figures depend on it; simulated latencies do not)."""
    import platform

    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "load_average_at_end": [round(x, 2) for x in load] if load else None,
    }


def _pct(s: Mapping[str, float | None]) -> str:
    if s["mean"] is None or s["min"] is None or s["max"] is None:
        return "-"
    return f"{100 * s['mean']:.1f} [{100 * s['min']:.1f}-{100 * s['max']:.1f}]"


def _num(s: Mapping[str, float | None], scale: float = 1.0, digits: int = 0) -> str:
    if s["mean"] is None:
        return "-"
    return f"{s['mean'] * scale:.{digits}f}"


def _signed(s: Mapping[str, float | None]) -> str:
    if s["mean"] is None or s["min"] is None or s["max"] is None:
        return "-"
    return f"{100 * s['mean']:+.1f} [{100 * s['min']:+.1f} to {100 * s['max']:+.1f}]"


def bracket_capacity(rows: Sequence[Mapping[str, Any]], target: float) -> dict[str, dict[str, Any]]:
    """The SLO capacity bracketed by the evaluation loads alone (no bisection): per policy and
    replicate, the highest evaluation load up to which every load kept ``target`` of requests
    within SLO. What a file stopped during its bisection (a checkpoint) can still report."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["load"]):
        by_policy.setdefault(row["policy"], []).append(row)
    capacity: dict[str, dict[str, Any]] = {}
    for policy, at in by_policy.items():
        per: list[tuple[float, float | None, float]] = []
        for r in range(len(at[0]["runs"])):
            lo, hi, tokens = 0.0, None, 0.0
            for row in at:
                run = row["runs"][r]
                if run["slo_attainment"] < target:
                    hi = row["load"]
                    break
                lo, tokens = row["load"], run["slo_tokens_s"]
            per.append((lo, hi, tokens))
        capacity[policy] = {
            "load": _stats([lo for lo, _, _ in per]),
            "slo_tokens_s_at_capacity": _stats([t for _, _, t in per]),
            "censored": any(hi is None for _, hi, _ in per),
            "brackets": [[lo, hi] for lo, hi, _ in per],
            "bisected": False,
        }
    return capacity


def refresh(data: dict[str, Any]) -> dict[str, Any]:
    """Verdicts and headline recomputed from a results file's rows (after merging runs). A
    file without capacities (stopped during the bisection) gets them bracketed by the
    evaluation loads, marked as not bisected."""
    if not data["capacity"]:
        data["capacity"] = bracket_capacity(data["results"], data["protocol"]["capacity_target"])
    data["verdicts"] = verdicts(data["results"])
    data["headline"] = headline(data["results"], data["capacity"])
    return data


def table(data: Mapping[str, Any]) -> str:
    """The protocol's markdown tables: per load, then SLO capacity, then the headline."""
    proto = data["protocol"]
    lines = [
        f"Suite {proto['suite']['name']}: {proto['suite']['trace']}, {proto['suite']['pods']} x "
        f"{proto['suite']['gpu']}{', P/D ' + proto['suite']['pd'] if proto['suite']['pd'] else ''}"
        f"; SLO {proto['suite']['ttft_slo_ms']:g} ms TTFT / {proto['suite']['tpot_slo_ms']:g} ms "
        f"TPOT; {len(proto['seeds'])} evaluation slices of {proto['slice_requests']} requests "
        "(mean [min-max]); options tuned on the tuning slice only; load 1 = "
        + (
            "each slice's own rate"
            if proto.get("load_basis", "slice") == "slice"  # files from before the option
            else "the whole trace's mean rate"
        ),
        "",
        "| load | policy (tuned options) | SLO met % | TTFT p50 / p90 (s) | TPOT p90 (ms) "
        "| SLO output tok/s |",
        "|---:|---|---|---|---:|---:|",
    ]
    for load in proto["loads"]:
        at = sorted(
            (r for r in data["results"] if r["load"] == load),
            key=lambda r: -(r["slo_attainment"]["mean"] or 0.0),
        )
        for r in at:
            opts = ", ".join(f"{k}={v}" for k, v in r["options"].items())
            lines.append(
                f"| {load:g} | {r['policy']}{f' ({opts})' if opts else ''} "
                f"| {_pct(r['slo_attainment'])} "
                f"| {_num(r['ttft_p50_ms'], 1e-3, 2)} / {_num(r['ttft_p90_ms'], 1e-3, 2)} "
                f"| {_num(r['tpot_p90_ms'])} | {_num(r['slo_tokens_s'])} |"
            )
    lines += [
        "",
        f"| policy | SLO capacity (load at {100 * proto['capacity_target']:.0f} % within SLO) "
        "| SLO output tok/s there |",
        "|---|---|---|",
    ]
    for p, c in sorted(data["capacity"].items(), key=lambda kv: -(kv[1]["load"]["mean"] or 0)):
        load = c["load"]
        mark = " (censored: passed the highest load tried)" if c["censored"] else ""
        if c.get("bisected") is False:
            mark += " (bracketed by the evaluation loads only: not bisected)"
        lines.append(
            f"| {p} | {load['mean']:.2f} [{load['min']:.2f}-{load['max']:.2f}]{mark} "
            f"| {_num(c['slo_tokens_s_at_capacity'])} |"
        )
    lines.append("")
    for v in data["verdicts"]:
        if v["best"]:
            lines.append(f"load {v['load']:g}: best {v['best']} (lead beyond the spread)")
        else:
            lines.append(
                f"load {v['load']:g}: leader {v['leader']}, within the spread of "
                + ", ".join(v["tied_with_leader"])
            )
    for h in data["headline"]:
        per = "; ".join(
            f"load {x['load']:g}: {x['verdict']} ({_signed(x['paired_difference'])} points "
            f"per slice, {x['paired_verdict']})"
            for x in h["slo_attainment"]
        )
        lines.append(f"headroom vs {h['peer']}: {per}; capacity: {h['capacity']}")
    t = data["timing"]
    lines.append(
        f"\n{t['simulations']} simulations ({t['reused_runs']} repeats reused, "
        f"{t.get('simulations_from_cache', 0)} read from the cache), "
        f"{t['simulation_s_total']} s of simulation in {t['wall_s']} s wall on "
        f"{t['workers']} workers"
        + (f"; {t['simulation_cpu_s']} CPU s simulated now" if t.get("simulation_cpu_s") else "")
    )
    return "\n".join(lines) + "\n"
