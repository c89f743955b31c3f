"""The what-if's simulation: the edited policy and the active one, replaying the same trace.

Both runs use the simulator of `backend/sim/` exactly as `headroom bench` does for Headroom's own
policy (the scheduling library, the hybrid predictor trained online every 10 simulated seconds,
prefix scores from the pods' caches), on the same pods, trace slice and seed; only the policy
spec differs. Requests carry the edited policy's default SLOs (or the active one's, or the
benchmark's 2 s / 100 ms), and both runs are scored against those.
"""

from __future__ import annotations

from typing import Any

from backend.policies.mapping import to_scheduling
from backend.policies.schemas import PolicySpec
from backend.predictor.knowable import against_floor
from backend.scheduling.types import TransferConfig
from backend.sim.engine import FLOOR_EVERY, SimConfig, SimResult, Simulation, max_context
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.report import QUANTILES, summarize
from backend.sim.routers import PredictedConfig
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.traces.loader import TRACE_NAMES, TenantModel, load_trace
from backend.sim.view import Slo
from backend.whatif.jobs import Progress, WhatIfJob

DEFAULT_TRACE = "mooncake-conversation"
# The trace's own request rate (LOAD x) keeps eight simulated pods busy; the slice replayed
# is the job's `requests` (HEADROOM_UI__WHATIF_REQUESTS), so that an answer comes in seconds.
LOAD = 1.0
PODS = 8
GPU = "a100-llama3-8b"
SEED = 0
DEFAULT_SLO = Slo(2000.0, 100.0)


def trace_choices() -> tuple[str, ...]:
    return tuple(TRACE_NAMES)


def _slo(candidate: PolicySpec, baseline: PolicySpec) -> Slo:
    ttft = candidate.default_ttft_slo_ms or baseline.default_ttft_slo_ms or DEFAULT_SLO.ttft_ms
    tpot = candidate.default_tpot_slo_ms or baseline.default_tpot_slo_ms or DEFAULT_SLO.tpot_ms
    return Slo(ttft, tpot)


def _policy(name: str, spec: PolicySpec) -> PredictedLatency:
    config = PredictedConfig(
        policy=to_scheduling(spec),
        kind="hybrid",
        prefix="precise",
        pd_ttft_label="prefill",
        learn_transfer=True,
    )
    return PredictedLatency(name, f"Headroom's chain with the {name} policy spec", config, SEED)


# (label, key in summarize()'s output, sub-key, scale, digits, higher is better; None: neither)
_ROWS: tuple[tuple[str, str, str | None, float, int, bool | None], ...] = (
    ("SLO attainment (%)", "slo_attainment", None, 100.0, 1, True),
    ("TTFT p50 (ms)", "ttft_ms", "p50", 1.0, 0, False),
    ("TTFT p90 (ms)", "ttft_ms", "p90", 1.0, 0, False),
    ("TTFT p99 (ms)", "ttft_ms", "p99", 1.0, 0, False),
    ("TPOT p50 (ms)", "tpot_ms", "p50", 1.0, 1, False),
    ("TPOT p90 (ms)", "tpot_ms", "p90", 1.0, 1, False),
    ("E2E p50 (ms)", "e2e_ms", "p50", 1.0, 0, False),
    ("E2E p90 (ms)", "e2e_ms", "p90", 1.0, 0, False),
    ("Goodput (req/s)", "goodput_rps", None, 1.0, 2, True),
    ("Shed requests", "shed", None, 1.0, 0, False),
    ("Prefix cache hit rate (%)", "prefix_hit_rate", None, 100.0, 1, True),
    # The live error beside what was knowable (``knowable_figures``); n/a before the first
    # model or with too few sampled requests.
    ("Live TTFT error (MAPE, %)", "live_ttft_mape", None, 100.0, 1, False),
    # What was knowable is not a goal: it moves with where the policy sends requests.
    ("TTFT error knowable at dispatch (floor MAPE, %)", "floor_ttft_mape", None, 100.0, 1, None),
    ("Live TPOT error (MAPE, %)", "live_tpot_mape", None, 100.0, 1, False),
    ("TPOT error knowable at dispatch (floor MAPE, %)", "floor_tpot_mape", None, 100.0, 1, None),
)


def knowable_figures(result: SimResult) -> dict[str, float | None]:
    """The live predictions' MAPE and the floor's, per target, on the requests that have both
    (``backend.predictor.knowable``, as the demo's Models page computes it)."""
    out: dict[str, float | None] = {}
    for target, actual, predicted, floor in (
        ("ttft", result.ttft_ms, result.predicted_ttft_ms, result.floor_ttft_ms),
        ("tpot", result.tpot_ms, result.predicted_tpot_ms, result.floor_tpot_ms),
    ):
        against = against_floor(actual, predicted, floor)
        out[f"live_{target}_mape"] = against.live.mape if against else None
        out[f"floor_{target}_mape"] = against.floor.mape if against else None
    return out


def _value(summary: dict[str, Any], key: str, sub: str | None, scale: float) -> float | None:
    value = summary.get(key)
    if sub is not None:
        value = value.get(sub) if isinstance(value, dict) else None
    return float(value) * scale if isinstance(value, int | float) else None


def _row(
    label: str,
    base: float | None,
    cand: float | None,
    digits: int,
    higher_better: bool | None,
) -> dict[str, Any]:
    change, verdict = "n/a", ""
    if base is not None and cand is not None:
        delta = cand - base
        if abs(delta) < 10 ** (-digits) / 2:
            change = "same"
        else:
            change = f"{delta / base * 100:+.1f} %" if base else f"{delta:+.{digits}f}"
            if higher_better is not None:
                verdict = "better" if (delta > 0) == higher_better else "worse"
    return {
        "metric": label,
        "baseline": base,
        "candidate": cand,
        "digits": digits,
        "change": change,
        "verdict": verdict,
    }


def _cdf(title: str, axis: str, runs: list[tuple[str, dict[str, Any]]], key: str) -> dict[str, Any]:
    series = [
        {
            "label": label,
            "points": [[x, round(float(q), 2)] for x, q in zip(s[key], QUANTILES, strict=False)],
        }
        for label, s in runs
        if s.get(key)
    ]
    return {
        "title": title,
        "kind": "lines",
        "data": {"x": axis, "y": "share of requests", "xlog": True, "series": series},
    }


def compare_policies(job: WhatIfJob, progress: Progress) -> dict[str, Any]:
    candidate = PolicySpec.model_validate(job.candidate)
    baseline = PolicySpec.model_validate(job.baseline)
    progress(0.0, f"loading trace {job.trace}")
    tenants = TenantModel(seed=SEED) if job.trace.startswith("azure") else None
    pool = build_pool(PODS, GPU, None, "rack")
    trace = load_trace(job.trace, tenants).head(job.requests)
    trace = trace.clipped(max_context(pool)).scaled(LOAD)
    profile = load_profile(pool[0].profile)
    fabric = TransferConfig(kv_bytes_per_token=profile.kv_bytes_per_token)
    slo = _slo(candidate, baseline)
    n = len(trace)
    total = 2 * n
    done = 0
    summaries = {}
    for phase, (label, spec) in enumerate((("active", baseline), ("edited", candidate))):
        message = f"simulating the {label} policy ({phase + 1} of 2)"
        progress(done / total, message)

        def step(count: int, message: str = message) -> None:
            nonlocal done
            done += count
            progress(done / total, message)

        config = SimConfig(
            slo,
            seed=SEED,
            transfer=fabric,
            floor_every=FLOOR_EVERY,
        )
        result = Simulation(trace, pool, _policy(label, spec), config).run(step)
        summaries[label] = summarize(result, slo) | knowable_figures(result)
    base, cand = summaries["active"], summaries["edited"]
    rows = [
        _row(label, _value(base, key, sub, scale), _value(cand, key, sub, scale), digits, higher)
        for label, key, sub, scale, digits, higher in _ROWS
    ]
    runs = [("active policy", base), ("edited policy", cand)]
    percentiles = ("p50", "p90", "p99")
    return {
        "summary": (
            f"{n} requests of {job.trace} at {LOAD:g}x its arrival rate on {PODS} simulated "
            f"{GPU} pods, SLOs TTFT {slo.ttft_ms:g} ms / TPOT {slo.tpot_ms:g} ms; the same "
            f"seed for both runs (wall time {base['wall_s'] + cand['wall_s']:.1f} s)."
        ),
        "requests": n,
        "slo": {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "rows": rows,
        "charts": [
            _cdf("TTFT distribution", "TTFT (ms)", runs, "ttft_quantiles_ms"),
            _cdf("End-to-end latency distribution", "E2E (ms)", runs, "e2e_quantiles_ms"),
            {
                "title": "TTFT percentiles",
                "kind": "bars",
                "data": {
                    "labels": list(percentiles),
                    "y": "TTFT (ms)",
                    "series": [
                        {"label": label, "values": [s["ttft_ms"].get(p) for p in percentiles]}
                        for label, s in runs
                    ],
                },
            },
        ],
    }
