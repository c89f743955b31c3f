"""The advisor's search: the best routing config for a workload, proven on parts it was not
chosen on.

A budgeted search (successive halving), not a grid of thousands:

1. **Screen.** Every candidate runs once on the workload's *tuning part* (first seed).
2. **Confirm.** The best ``survivors`` EPP-expressible candidates and the best Headroom-only one
   run again on the tuning part with the other seeds; they are ranked by their mean.
3. **Evaluate.** The best ``finalists`` of those, the best Headroom-only one, the pool's active
   policy and llm-d's shipped chain (the reference a platform team has without Headroom) run on
   the *held-out parts*, part ``i`` with seed ``i`` (the protocol's replicates: the spread covers
   traffic and simulator randomness). The ranking is by held-out mean SLO attainment, with the
   min-max over the replicates, and each is compared with the active policy by the protocol's
   rule (a lead counts only beyond both spreads).

The candidates are the policy space an unchanged llm-d EPP can express (the predicted-latency
chain's strategy, TTFT/TPOT weighting, affinity thresholds and exploration, tier epsilon, served
Headroom's predictions; llm-d's current default chain with the protocol's options for it; the
load+prefix weights), plus Headroom-only options (the best-fit picker; LMetric with the
protocol's options for it), labelled as needing ``/v1/schedule``. Every candidate but llm-d's
shipped reference is a PolicySpec naming its chain (``chain``), so Apply can save any of them;
the simulator runs it with the peer router of that chain, which decides with the same library
core as ``/v1/schedule`` (``backend.scheduling.load_chains``). The peers and their options are
the benchmark protocol's (``backend.sim.routers``), run by its ``simulate_trace``.

The workload is an interface (:class:`Workload`): the simulator's request parts and pool. Its
sources are in ``backend.advisor.workloads``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np

from backend.policies.mapping import to_scheduling
from backend.policies.schemas import PolicySpec
from backend.scheduling.epp_config import epp_config_yaml, headroom_only
from backend.scheduling.types import TransferConfig
from backend.sim.pool import PodSpec
from backend.sim.protocol import compare, figures, simulate_trace
from backend.sim.routers import LLMD_DEFAULT, LLMD_PREDICTED, OURS, POLICIES, variants
from backend.sim.traces.loader import Trace
from backend.sim.view import Slo

Kind = Literal["epp", "schedule", "active", "reference"]
Progress = Callable[[float, str], None]

# The PolicySpec fields a predicted-chain candidate sets; the rest (SLOs, transfer links, ...)
# stay the pool's own.
SEARCHED_FIELDS: Final = (
    "mode",
    "strategy",
    "ttft_weight",
    "epsilon_explore_neg",
    "strict_affinity_threshold",
    "loose_affinity_threshold",
    "affinity_exploration_probability",
    "picker",
    "pd_selection",
)
# Affinity settings searched: upstream's shipped pair, and a looser one that keeps sessions on
# their pod at lower prefix scores and explores more (Mooncake's long shared contexts reward it).
AFFINITY: Final = {
    "affinity as shipped": {
        "strict_affinity_threshold": 0.99,
        "loose_affinity_threshold": 0.8,
        "affinity_exploration_probability": 0.01,
    },
    "looser affinity": {
        "strict_affinity_threshold": 0.9,
        "loose_affinity_threshold": 0.5,
        "affinity_exploration_probability": 0.05,
    },
}
TTFT_WEIGHTS: Final = (0.8, 0.5, 1.0)
LOAD_PREFIX: Final = ("llm-d-322", "llm-d-111")


@dataclass(frozen=True)
class Workload:
    """What the search runs on: the simulator's request parts and the pool serving them."""

    name: str
    source: Literal["shipped-trace", "pool-replay"]
    label: str
    """Says what the traffic is (a shipped trace is not this pool's own traffic)."""
    parts: tuple[Trace, ...]
    """``parts[0]`` is the tuning part, ``parts[1:]`` the held-out ones (one per seed)."""
    pool: tuple[PodSpec, ...]
    slo: Slo
    load: float
    """The parts' load, x the traffic's recorded rate."""
    sim_options: Mapping[str, Any] = field(default_factory=dict)
    """Simulator options of every run (a replay's calibrated pod: its cost factors)."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """What the source knows about the traffic (a replay's calibration, outputs drawn...)."""

    @property
    def held_out(self) -> int:
        return len(self.parts) - 1


@dataclass(frozen=True)
class Budget:
    requests: int = 1000
    """Requests per part (each simulation replays one part)."""
    seeds: int = 3
    survivors: int = 6
    finalists: int = 3

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.survivors < 1 or self.finalists < 1 or self.requests < 10:
            raise ValueError("seeds, survivors and finalists must be >= 1, requests >= 10")


@dataclass(frozen=True, eq=False)
class Candidate:
    label: str
    policy: str
    """A protocol policy name (``backend.sim.routers.POLICIES``)."""
    options: tuple[tuple[str, Any], ...]
    kind: Kind
    spec: Mapping[str, Any] | None = None
    """The whole PolicySpec (JSON) that Apply saves; None: not expressible as a Headroom policy."""


# A spec's llm-d-default fields and the protocol peer's options they set.
_STICKY_OPTIONS: Final = {
    "sticky_affinity_threshold": "affinity_threshold",
    "max_tokens_in_flight_penalty": "max_tokens_in_flight_penalty",
    "max_prefix_tokens_to_match": "max_prefix_tokens",
    "queue_threshold_tokens": "queue_threshold_tokens",
}
_LOAD_PREFIX_PEERS: Final = {(2.0, 2.0, 3.0): "llm-d-322", (1.0, 1.0, 1.0): "llm-d-111"}
_DEFAULTS: Final = PolicySpec()


def protocol_policy(spec: PolicySpec) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The protocol policy (``backend.sim.routers.POLICIES``) and options that run ``spec``'s
    chain in the simulator. The peers decide with the same library cores as ``/v1/schedule``;
    a predicted-latency spec runs as Headroom's policy with the searched fields."""
    data = spec.model_dump(mode="json")
    if spec.chain == "llm-d-default":
        return LLMD_DEFAULT, tuple(
            (option, data[field])
            for field, option in _STICKY_OPTIONS.items()
            if data[field] != getattr(_DEFAULTS, field)
        )
    if spec.chain == "load-prefix":
        weights = (
            spec.load_prefix_queue_weight,
            spec.load_prefix_kv_weight,
            spec.load_prefix_prefix_weight,
        )
        if weights in _LOAD_PREFIX_PEERS:
            return _LOAD_PREFIX_PEERS[weights], ()
        return "llm-d-322", tuple(zip(("queue", "kv", "prefix"), weights, strict=True))
    if spec.chain == "lmetric":
        return "lmetric", tuple(
            (field.removeprefix("lmetric_"), data[field])
            for field in ("lmetric_pending", "lmetric_batch")
            if data[field] != getattr(_DEFAULTS, field)
        )
    return OURS, tuple((k, data[k]) for k in SEARCHED_FIELDS)


def via_schedule(kind: Kind, spec: PolicySpec) -> bool:
    """Whether the candidate's decisions come from ``/v1/schedule``: a Headroom-only candidate,
    or an active policy with an option no upstream plugin implements. Only those decisions are
    held in the ledger (``backend.scheduling.decided``); an unchanged EPP calls ``/predict``."""
    if kind != "active":
        return kind == "schedule"
    flags = headroom_only(to_scheduling(spec))
    return not all(v for k, v in flags.items() if k.endswith("_upstream_equivalent"))


def run_as(kind: Kind, spec: PolicySpec) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """The protocol policy and options that run ``spec`` as a ``kind`` candidate: its chain's
    (``protocol_policy``), holding no decision where an unchanged EPP decides."""
    policy, options = protocol_policy(spec)
    if policy == OURS and not via_schedule(kind, spec):
        options = (*options, ("decided_hold_ms", 0.0))
    return policy, options


def _predicted(label: str, kind: Kind, spec: PolicySpec) -> Candidate:
    """A candidate that Apply can save: ``spec``, run by its chain's protocol policy."""
    policy, options = run_as(kind, spec)
    return Candidate(label, policy, options, kind, spec.model_dump(mode="json"))


def candidates(active: PolicySpec) -> list[Candidate]:
    """The screening set: EPP-expressible first, then Headroom-only, then the references."""
    epp = {"picker": "weighted_random", "pd_selection": "greedy", "mode": "slo"}
    out: list[Candidate] = []
    for strategy in ("least", "most"):
        for weight in TTFT_WEIGHTS:
            for name, affinity in AFFINITY.items():
                spec = active.model_copy(
                    update={**epp, "strategy": strategy, "ttft_weight": weight, **affinity}
                )
                label = f"predicted chain: {strategy}, TTFT/TPOT {weight:g}/{1 - weight:g}, {name}"
                out.append(_predicted(label, "epp", spec))
        # More exploration into the tier that misses the SLO, at the shipped weights.
        spec = active.model_copy(
            update={**epp, "strategy": strategy, "ttft_weight": 0.8, "epsilon_explore_neg": 0.1}
        )
        out.append(_predicted(f"predicted chain: {strategy}, tier epsilon 0.1", "epp", spec))
    for options in variants(LLMD_DEFAULT):
        opts = ", ".join(f"{k}={v}" for k, v in options.items()) or "as shipped"
        fields = {f: options[o] for f, o in _STICKY_OPTIONS.items() if o in options}
        spec = active.model_copy(update={"chain": "llm-d-default", **fields})
        out.append(_predicted(f"llm-d default chain (sticky until saturated): {opts}", "epp", spec))
    for name in LOAD_PREFIX:
        q, kv, p = next(w for w, peer in _LOAD_PREFIX_PEERS.items() if peer == name)
        spec = active.model_copy(
            update={
                "chain": "load-prefix",
                "load_prefix_queue_weight": q,
                "load_prefix_kv_weight": kv,
                "load_prefix_prefix_weight": p,
            }
        )
        weights = ":".join(name.removeprefix("llm-d-"))
        out.append(_predicted(f"load+prefix {weights} (prefix:queue:kv)", "epp", spec))
    # Headroom's own scheduling: the best-fit picker and, on a P/D pool, the joint choice of the
    # prefill/decode pair priced with the learned transfer (no effect on an aggregated pool).
    # Both need /v1/schedule: an unchanged EPP draws a lottery and picks D, then P, apart.
    for strategy in ("most", "least"):
        spec = active.model_copy(
            update={
                "picker": "best_fit",
                "strategy": strategy,
                "mode": "slo",
                "ttft_weight": 0.8,
                "pd_selection": "joint",
            }
        )
        label = f"Headroom best-fit picker, {strategy}, joint P/D pairs"
        out.append(_predicted(label, "schedule", spec))
    # LMetric with the protocol's options for it: no llm-d plugin computes its score.
    for options in variants("lmetric"):
        opts = ", ".join(f"{k}={v}" for k, v in options.items()) or "as published"
        fields = {f"lmetric_{k}": v for k, v in options.items()}
        spec = active.model_copy(update={"chain": "lmetric", **fields})
        out.append(_predicted(f"LMetric (Headroom-only): {opts}", "schedule", spec))
    # The active policy runs as itself (the baseline); a candidate equal to it adds nothing.
    current = active.model_dump(mode="json")
    return [c for c in out if c.spec is None or dict(c.spec) != current]


def active_candidate(active: PolicySpec) -> Candidate:
    return _predicted("the pool's active policy", "active", active)


def shipped_chain() -> Candidate:
    return Candidate(
        "llm-d's predicted-latency chain as shipped (its own XGBoost sidecar)",
        LLMD_PREDICTED,
        (),
        "reference",
    )


def _figures(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    def stats(key: str) -> dict[str, float | None]:
        v = [float(r[key]) for r in runs if r.get(key) is not None]
        if not v:
            return {"mean": None, "min": None, "max": None}
        return {"mean": round(float(np.mean(v)), 4), "min": min(v), "max": max(v)}

    return {
        "slo_attainment": stats("slo_attainment"),
        # Replicate by replicate (part i + 1, seed i): for slice-by-slice comparisons.
        "slo_attainment_runs": [r["slo_attainment"] for r in runs],
        "ttft_p90_ms": stats("ttft_p90_ms"),
        "tpot_p90_ms": stats("tpot_p90_ms"),
    }


def _how(candidate: Candidate) -> dict[str, Any]:
    """How a platform team runs the candidate: the EPP config, or what it needs."""
    if candidate.kind == "schedule":
        return {"needs": "/v1/schedule", "epp_config": None}
    if candidate.spec is not None:
        policy = to_scheduling(PolicySpec.model_validate(candidate.spec))
        return {"needs": "EPP config", "epp_config": epp_config_yaml(policy)}
    return {
        "needs": "llm-d's own sidecar and shipped config",
        "epp_config": None,
        "reproduces": POLICIES[candidate.policy](
            TransferConfig(), 0, dict(candidate.options)
        ).reproduces,
    }


def advise(
    workload: Workload,
    active: PolicySpec,
    budget: Budget,
    progress: Progress = lambda fraction, message: None,
) -> dict[str, Any]:
    """Run the search; plain JSON types."""
    started = time.perf_counter()
    pool = list(workload.pool)
    seeds = list(range(max(1, min(budget.seeds, workload.held_out))))
    screened = candidates(active)
    planned = (
        len(screened)
        + (budget.survivors + 1) * (len(seeds) - 1)
        + (budget.finalists + 3) * len(seeds)
    )
    done = 0
    results: dict[tuple[Candidate, int, int], dict[str, Any]] = {}

    def run(c: Candidate, part: int, seed: int, stage: str) -> dict[str, Any]:
        nonlocal done
        key = (c, part, seed)
        if key not in results:
            progress(done / planned, f"{stage}: {c.label} (part {part}, seed {seed})")
            factory = POLICIES[c.policy]
            run = simulate_trace(
                workload.parts[part],
                pool,
                workload.slo,
                lambda transfer: factory(transfer, seed, dict(c.options)),
                seed,
                workload.sim_options,
            )
            results[key] = figures(run, workload.slo)
            done += 1
        return results[key]

    def tuning(c: Candidate, n_seeds: int) -> float:
        return float(np.mean([run(c, 0, s, "tuning")["slo_attainment"] for s in seeds[:n_seeds]]))

    screen = {c: tuning(c, 1) for c in screened}
    epp = sorted((c for c in screened if c.kind == "epp"), key=lambda c: -screen[c])
    schedule = sorted((c for c in screened if c.kind == "schedule"), key=lambda c: -screen[c])
    confirmed = epp[: budget.survivors] + schedule[:1]
    confirm = {c: tuning(c, len(seeds)) for c in confirmed}
    best_epp = sorted(epp[: budget.survivors], key=lambda c: -confirm[c])[: budget.finalists]
    best_schedule = sorted(schedule[:1], key=lambda c: -confirm[c])
    base, reference = active_candidate(active), shipped_chain()
    finals = [*best_epp, *best_schedule, base, reference]
    held: dict[Candidate, dict[str, Any]] = {}
    for c in finals:
        runs = [run(c, i + 1, s, "held-out") for i, s in enumerate(seeds)]
        held[c] = _figures(runs)
    ranking = sorted(finals, key=lambda c: -(held[c]["slo_attainment"]["mean"] or 0.0))
    base_figures = held[base]["slo_attainment"]
    rows = []
    for c in ranking:
        spec_changes = (
            {k: v for k, v in c.spec.items() if active.model_dump(mode="json").get(k) != v}
            if c.spec is not None
            else None
        )
        rows.append(
            {
                "label": c.label,
                "kind": c.kind,
                "policy": c.policy,
                "options": dict(c.options),
                "appliable": c.spec is not None and c.kind in ("epp", "schedule"),
                "spec_changes": spec_changes,
                "tuning_slo_attainment": confirm.get(c, screen.get(c)),
                "held_out": held[c],
                "vs_active": compare(held[c]["slo_attainment"], base_figures)
                if c is not base
                else "-",
                "spec": dict(c.spec) if c.spec is not None else None,
                **_how(c),
            }
        )
    epp_rows = [i for i, row in enumerate(rows) if row["kind"] == "epp"]
    appliable_rows = [i for i, row in enumerate(rows) if row["appliable"]]
    return {
        # Indices in ``ranking``: the best EPP-expressible candidate on the held-out parts, and
        # the best that Apply can save as a Headroom policy.
        "pick": epp_rows[0] if epp_rows else None,
        "pick_appliable": appliable_rows[0] if appliable_rows else None,
        "workload": {
            "name": workload.name,
            "source": workload.source,
            "label": workload.label,
            "requests_per_part": len(workload.parts[0]),
            "held_out_parts": len(seeds),
            "load": workload.load,
            "pods": len(pool),
            "gpu": sorted({p.profile for p in pool}),
            "slo": {"ttft_ms": workload.slo.ttft_ms, "tpot_ms": workload.slo.tpot_ms},
            **({"replay": dict(workload.details)} if workload.details else {}),
        },
        "seeds": seeds,
        "simulations": len(results),
        "wall_s": round(time.perf_counter() - started, 1),
        "screened": [
            {"label": c.label, "kind": c.kind, "tuning_slo_attainment": round(screen[c], 4)}
            for c in sorted(screened, key=lambda c: -screen[c])
        ],
        "ranking": rows,
    }
