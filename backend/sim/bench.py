"""The routing benchmark: every policy over one trace at several loads, on one pool.

``run_bench`` is what ``headroom bench``, the ``headroom.simulate`` Celery task and
``bench/routing.py`` call; it returns plain JSON types. ``write_outputs`` adds the markdown
table and the plots.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, Simulation, max_context
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.protocol import machine
from backend.sim.report import markdown_table, summarize, write_plots
from backend.sim.routers import MAIN_POLICIES, POLICIES, make_policy
from backend.sim.traces.loader import TRACE_NAMES, TenantModel, load_trace
from backend.sim.view import Slo

DEFAULT_POLICIES = MAIN_POLICIES


@dataclass(frozen=True)
class BenchConfig:
    trace: str = "mooncake-conversation"
    pods: int = 8
    gpu: str = "a100-llama3-8b"
    pd: str | None = None
    layout: str = "rack"
    loads: tuple[float, ...] = (0.5, 1.0, 1.5)
    policies: tuple[str, ...] = DEFAULT_POLICIES
    seed: int = 0
    ttft_slo_ms: float = 2000.0
    tpot_slo_ms: float = 100.0
    limit: int | None = None
    """Replay only the first ``limit`` requests."""
    max_model_len: int | None = None
    """Clip requests to this context (default: what the pods' KV caches hold)."""
    sheddable_fraction: float = 0.0
    tenants: int = 32
    """Azure traces: tenants of the synthetic system prompts."""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.trace not in TRACE_NAMES:
            raise ValueError(f"unknown trace {self.trace!r}; available: {', '.join(TRACE_NAMES)}")
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; available: {', '.join(POLICIES)}")
        if not self.loads or any(not x > 0 for x in self.loads):
            raise ValueError("loads must be positive numbers")
        if not self.policies:
            raise ValueError("no policies to run")
        if not 0.0 <= self.sheddable_fraction <= 1.0:
            raise ValueError("sheddable_fraction must be in [0, 1]")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        fields = dict(data)
        for key in ("loads", "policies"):
            if key in fields and isinstance(fields[key], list | tuple):
                fields[key] = tuple(fields[key])
        return cls(**fields)


Progress = Callable[[int], None]


def run_bench(
    config: BenchConfig,
    *,
    progress: Progress | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every (load, policy) pair; ``progress`` gets request counts as they are replayed."""
    tenants = TenantModel(tenants=config.tenants, seed=config.seed)
    trace = load_trace(config.trace, tenants if config.trace.startswith("azure") else None)
    if config.limit is not None:
        trace = trace.head(config.limit)
    pool = build_pool(config.pods, config.gpu, config.pd, config.layout)
    limit = max_context(pool)
    if config.max_model_len is not None:
        limit = min(limit, config.max_model_len)
    trace = trace.clipped(limit)
    profile = load_profile(pool[0].profile)
    transfer = TransferConfig(kv_bytes_per_token=profile.kv_bytes_per_token)
    slo = Slo(config.ttft_slo_ms, config.tpot_slo_ms)
    results = []
    started = time.perf_counter()
    for load in config.loads:
        scaled = trace.scaled(load)
        for name in config.policies:
            policy = make_policy(name, transfer, config.seed)
            sim = Simulation(
                scaled,
                pool,
                policy,
                SimConfig(
                    slo,
                    seed=config.seed,
                    sheddable_fraction=config.sheddable_fraction,
                    transfer=transfer,
                ),
            )
            row = {"load": load, "policy": name, **summarize(sim.run(progress), slo)}
            results.append(row)
            if on_result is not None:
                on_result(row)
    counts: dict[str, int] = {}
    for spec in pool:
        counts[spec.profile] = counts.get(spec.profile, 0) + 1
    mix = " + ".join(f"{n} x {name}" for name, n in counts.items())
    roles = f", P/D {config.pd}" if config.pd else ""
    return {
        "config": {k: v for k, v in asdict(config).items() if k != "extra"} | config.extra,
        "trace": {"name": trace.name, "prefixes": trace.prefix_source, **trace.stats()},
        "pool": {
            "summary": f"{mix}{roles}, layout {config.layout}",
            "max_context_tokens": limit,
            "pods": [
                {
                    "name": p.name,
                    "profile": p.profile,
                    "role": p.role or "both",
                    "rack": p.topology.rack,
                    "region": p.topology.region,
                }
                for p in pool
            ],
            "transfer": asdict(transfer),
        },
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "policies": {name: make_policy(name, transfer).reproduces for name in config.policies},
        "results": results,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine(),
    }


def total_requests(config: BenchConfig) -> int:
    """Requests the benchmark replays in all (for a progress bar)."""
    n = len(load_trace(config.trace)) if config.limit is None else config.limit
    return n * len(config.loads) * len(config.policies)


def write_outputs(data: dict[str, Any], out_dir: Path, prefix: str = "") -> list[Path]:
    """``results.json``, ``results.md`` and the PNG plots into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"{prefix}results.json"
    json_path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    md_path = out_dir / f"{prefix}results.md"
    md_path.write_text(markdown_table(data["results"]), encoding="utf-8")
    return [json_path, md_path, *write_plots(data, out_dir, prefix)]


def slim(data: dict[str, Any], keep: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON without the per-run bulk (quantile curves, per-pod rows, predictor series)."""
    out = dict(data)
    rows = []
    for r in data["results"]:
        row = {
            k: v
            for k, v in r.items()
            if k not in ("ttft_quantiles_ms", "e2e_quantiles_ms", "pods", "policy_detail")
            or k in keep
        }
        policy = r.get("policy_detail", {})
        if "predictor" in policy:
            row["predictor"] = {
                "fits": policy["predictor"]["fits"],
                "fit_seconds_total": policy["predictor"]["fit_seconds_total"],
                "fallback_decisions": policy.get("fallback_decisions"),
            }
        rows.append(row)
    out["results"] = rows
    return out
