"""Routing policies: the peers' (each named with the version it reproduces), Headroom's, and the
myopic look-ahead reference (``lookahead-ref``, formerly "oracle": not a ceiling)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from itertools import product
from typing import Any, Final

from backend.predictor.regressors import TrainParams
from backend.scheduling.types import SchedulingPolicy, Scorer, TransferConfig
from backend.settings import DECIDED_HOLD_MS
from backend.sim.routers.base import Route, RoutingPolicy
from backend.sim.routers.heuristic import (
    DynamoKv,
    LMetric,
    LoadPrefix,
    SglangCacheAware,
    StickyUntilSaturated,
)
from backend.sim.routers.oracle import Oracle
from backend.sim.routers.predicted import PredictedConfig, PredictedLatency
from backend.sim.routers.simple import LeastRequest, RoundRobin

LLMD_PREDICTED = "llm-d-predicted"
LLMD_PREDICTED_BEST = "llm-d-predicted-best"
LLMD_DEFAULT = "llm-d-default"
REFERENCE = "lookahead-ref"
LLMD_ROUTING = "llm-d-predicted-routing"
OURS = "headroom"

UPSTREAM_PREDICTED = (
    "llm-d predicted-latency chain as upstream ships it (llm-d-router ebab6879 routerlib chart, "
    "latencyPredictor enabled): SLO-aware chain (admitter, strict affinity 0.99, SLO tier "
    "filter, loose affinity 0.80, latency scorer 0.8/0.2, strategy least), weighted-random "
    "picker, greedy P/D with the transfer smeared into the TTFT label, XGBoost training server "
    "(200 trees, depth 6), approximate prefix index"
)
UPSTREAM_ROUTING = (
    "llm-d predicted-latency chain, routing-only mode as in upstream's published benchmark "
    "(predicted-latency.values.yaml, llm-d-router ebab6879): no SLO headers, loose affinity "
    "0.80 -> latency scorer (lowest predicted TTFT) -> weighted-random picker, TTFT-only "
    "XGBoost training server, approximate prefix index"
)
UPSTREAM_PREDICTED_BEST = (
    "llm-d predicted-latency chain at its best option: the same chain and XGBoost training "
    "server with strategy most (largest headroom) and precise prefix scores (KV events, as "
    "precise-prefix-cache-scorer gives them); other options as the SLO guide ships them"
)
OURS_GREEDY_PD = "headroom-greedy-pd"
OURS_NO_HOLD = "headroom-no-hold"
OURS_NO_PROGRESS = "headroom-no-progress"
OURS_INTERFERENCE = "headroom-interference"
INTERFERENCE_ABLATIONS: Final[dict[str, Scorer]] = {
    OURS_INTERFERENCE: "interference",
    "headroom-interference-tpot": "interference_tpot",
    "headroom-interference-queue": "interference_queue",
}
"""Headroom's policy with the interference scorer (both terms), and each term alone."""
OURS_PREDICTED = (
    "Headroom: the same library with the best-fit picker on strategy most (largest headroom: "
    "spread), joint P/D pair selection priced with a learned KV-transfer model, the hybrid "
    "(physics base x tree correction) predictor (one per GPU class in mixed pools), and prefix "
    "scores from the pods' KV events"
)


def upstream_config(transfer: TransferConfig) -> PredictedConfig:
    return PredictedConfig(
        policy=SchedulingPolicy(transfer=transfer),
        kind="xgboost",
        params=TrainParams.upstream(),
        prefix="approx",
        pd_ttft_label="client",
        learn_transfer=False,
    )


def upstream_best_config(transfer: TransferConfig) -> PredictedConfig:
    """Upstream's chain with the two options its config exposes that help it most here."""
    shipped = upstream_config(transfer)
    return replace(shipped, policy=replace(shipped.policy, strategy="most"), prefix="precise")


def upstream_routing_config(transfer: TransferConfig) -> PredictedConfig:
    return PredictedConfig(
        policy=SchedulingPolicy(mode="routing", transfer=transfer),
        kind="xgboost",
        params=TrainParams.upstream(),
        prefix="approx",
        pd_ttft_label="client",
        send_slo=False,
        train_tpot=False,
    )


def ours_config(transfer: TransferConfig, pd_selection: str = "joint") -> PredictedConfig:
    """Chosen by measurement (docs/benchmarks.md): strategy ``most`` beat upstream's ``least`` by
    5-10 points of SLO attainment on the Mooncake trace near saturation; best fit beat the
    lottery on TTFT p90; KV-event prefix scores edged out the approximate index."""
    return PredictedConfig(
        policy=SchedulingPolicy(
            picker="best_fit",
            strategy="most",
            pd_selection="joint" if pd_selection == "joint" else "greedy",
            transfer=transfer,
        ),
        kind="hybrid",
        prefix="precise",
        pd_ttft_label="prefill",
        learn_transfer=True,
        per_class=True,
        live_calibration=True,
        # /v1/schedule holds its decisions for as long by default (backend/scheduling/decided.py).
        decided_hold_ms=DECIDED_HOLD_MS,
        send_progress=True,
    )


Options = Mapping[str, Any]
PolicyFactory = Callable[[TransferConfig, int, Options], RoutingPolicy]


_CONFIG_OPTIONS: Final = frozenset({"prefix", "decided_hold_ms"})
"""Options that set the simulated router's ``PredictedConfig``, not its ``SchedulingPolicy``."""


def _predicted(
    name: str, reproduces: str, config: PredictedConfig, seed: int, options: Options
) -> PredictedLatency:
    """A predicted-latency policy with ``options`` applied: ``prefix`` (approx | precise) is the
    prefix-score source, ``decided_hold_ms`` how long its decisions count before dispatch (0: an
    unchanged EPP, which calls ``/predict`` and holds none), every other key a
    ``SchedulingPolicy`` field."""
    policy = {k: v for k, v in options.items() if k not in _CONFIG_OPTIONS}
    config = replace(
        config,
        policy=replace(config.policy, **policy),
        prefix=options.get("prefix", config.prefix),
        decided_hold_ms=float(options.get("decided_hold_ms", config.decided_hold_ms)),
    )
    if options:
        reproduces += " | options: " + ", ".join(f"{k}={v}" for k, v in options.items())
    return PredictedLatency(name, reproduces, config, seed=seed)


def _interference(name: str, scorer: Scorer) -> PolicyFactory:
    def make(t: TransferConfig, s: int, o: Options) -> RoutingPolicy:
        config = ours_config(t)
        config = replace(config, policy=replace(config.policy, scorer=scorer))
        reproduces = f"Headroom's policy with the {scorer} scorer (Headroom-only: /v1/schedule)"
        return _predicted(name, reproduces, config, s, o)

    return make


POLICIES: Final[dict[str, PolicyFactory]] = {
    "round-robin": lambda t, s, o: RoundRobin(),
    "least-request": lambda t, s, o: LeastRequest(),
    # The weights can be overridden (``queue``, ``kv``, ``prefix``): the advisor runs a policy's
    # own weights this way; the protocol runs the two as named.
    "llm-d-322": lambda t, s, o: LoadPrefix(**{"queue": 2.0, "kv": 2.0, "prefix": 3.0, **o}),
    "llm-d-111": lambda t, s, o: LoadPrefix(**{"queue": 1.0, "kv": 1.0, "prefix": 1.0, **o}),
    LLMD_DEFAULT: lambda t, s, o: StickyUntilSaturated(**o),
    "lmetric": lambda t, s, o: LMetric(**o),
    "dynamo-kv": lambda t, s, o: DynamoKv(**o),
    "sglang-cache-aware": lambda t, s, o: SglangCacheAware(**o),
    LLMD_PREDICTED: lambda t, s, o: _predicted(
        LLMD_PREDICTED, UPSTREAM_PREDICTED, upstream_config(t), s, o
    ),
    LLMD_PREDICTED_BEST: lambda t, s, o: _predicted(
        LLMD_PREDICTED_BEST, UPSTREAM_PREDICTED_BEST, upstream_best_config(t), s, o
    ),
    LLMD_ROUTING: lambda t, s, o: _predicted(
        LLMD_ROUTING, UPSTREAM_ROUTING, upstream_routing_config(t), s, o
    ),
    OURS: lambda t, s, o: _predicted(OURS, OURS_PREDICTED, ours_config(t), s, o),
    OURS_GREEDY_PD: lambda t, s, o: _predicted(
        OURS_GREEDY_PD,
        "ablation: Headroom's policy with upstream's greedy P/D order (D on TPOT, then P on TTFT)",
        ours_config(t, "greedy"),
        s,
        o,
    ),
    # What holding its decisions until dispatch is worth (issue 17).
    OURS_NO_HOLD: lambda t, s, o: _predicted(
        OURS_NO_HOLD,
        "ablation: Headroom's policy with its decisions counted only once dispatched, as "
        "upstream's EPP counts them (decided_hold_ms 0)",
        replace(ours_config(t), decided_hold_ms=0.0),
        s,
        o,
    ),
    # What the pods' progress fields are worth (issue 17).
    OURS_NO_PROGRESS: lambda t, s, o: _predicted(
        OURS_NO_PROGRESS,
        "ablation: Headroom's policy without the pods' progress fields (ms_since_last_token, "
        "oldest_prefill_wait_ms, ms_since_last_first_token: 0, as upstream's EPP sends them)",
        replace(ours_config(t), send_progress=False),
        s,
        o,
    ),
    **{name: _interference(name, scorer) for name, scorer in INTERFERENCE_ABLATIONS.items()},
    REFERENCE: lambda t, s, o: Oracle(),
}
"""Name -> factory(transfer config of the pool's model, seed, options)."""

TUNABLE: Final[dict[str, dict[str, tuple[Any, ...]]]] = {
    OURS: {"strategy": ("most", "least"), "ttft_weight": (0.8, 1.0)},
    # The interference scorer and its ablations get Headroom's grid: the tie-break is its rule.
    **{
        name: {"strategy": ("most", "least"), "ttft_weight": (0.8, 1.0)}
        for name in INTERFERENCE_ABLATIONS
    },
    LLMD_PREDICTED_BEST: {"strategy": ("most", "least"), "prefix": ("precise", "approx")},
    LLMD_DEFAULT: {
        "affinity_threshold": (0.8, 0.5),
        "max_tokens_in_flight_penalty": (286_720, 65_536, 16_384),
    },
    "lmetric": {"pending": (True, False), "batch": ("inflight", "scraped")},
    "dynamo-kv": {"overlap_weight": (1.0, 0.5, 2.0)},
    "sglang-cache-aware": {"cache_threshold": (0.3, 0.5), "balance_abs_threshold": (64, 16)},
}
"""The options the benchmark protocol searches, per policy, on its tuning slice only (each
value list starts with the policy's own default). Policies absent here are run as named: as
shipped (``llm-d-predicted``, the load+prefix weights), or with nothing to tune."""
MAIN_POLICIES: Final = tuple(
    name for name in POLICIES if name != OURS_GREEDY_PD and name not in INTERFERENCE_ABLATIONS
)
"""Every policy but the ablations: greedy P/D (which only differs from ours under P/D) and the
interference scorer's (run by name: ``--policies``)."""


def variants(name: str) -> list[dict[str, Any]]:
    """Every combination of ``name``'s tunable options; the first is its default ({})."""
    grid = TUNABLE.get(name, {})
    out: list[dict[str, Any]] = [{}]
    for combo in product(*grid.values()):
        chosen = dict(zip(grid, combo, strict=True))
        defaults = {k: v[0] for k, v in grid.items()}
        if chosen != defaults:
            out.append(chosen)
    return out


def make_policy(
    name: str, transfer: TransferConfig, seed: int = 0, options: Options | None = None
) -> RoutingPolicy:
    if name not in POLICIES:
        raise KeyError(f"unknown policy {name!r}; available: {', '.join(POLICIES)}")
    opts = dict(options or {})
    allowed = TUNABLE.get(name, {})
    unknown = [k for k in opts if k not in allowed]
    if unknown:
        raise ValueError(
            f"policy {name!r} has no option(s) {unknown}; tunable: {', '.join(allowed) or 'none'}"
        )
    return POLICIES[name](transfer, seed, opts)


__all__ = [
    "LLMD_DEFAULT",
    "LLMD_PREDICTED",
    "LLMD_PREDICTED_BEST",
    "LLMD_ROUTING",
    "MAIN_POLICIES",
    "OURS",
    "OURS_GREEDY_PD",
    "OURS_NO_HOLD",
    "POLICIES",
    "REFERENCE",
    "TUNABLE",
    "PredictedConfig",
    "Route",
    "RoutingPolicy",
    "make_policy",
    "ours_config",
    "upstream_config",
    "variants",
]
