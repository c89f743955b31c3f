"""Figures of one simulation run, and the benchmark's JSON, markdown table and plots.

SLO attainment counts every request of the trace: a shed request misses its SLO. A request with
a single output token has no TPOT and meets the TPOT SLO trivially. Goodput is the number of
requests that met both SLOs per second of (scaled) trace time; SLO output tokens per second counts
the output tokens of those requests only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.sim.engine import SimResult
from backend.sim.view import Slo

QUANTILES = np.linspace(0.0, 1.0, 101)


def _pcts(values: npt.NDArray[np.float64]) -> dict[str, float | None]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {
        "p50": round(float(p50), 2),
        "p90": round(float(p90), 2),
        "p99": round(float(p99), 2),
        "mean": round(float(v.mean()), 2),
    }


def _quantiles(values: npt.NDArray[np.float64]) -> list[float]:
    v = values[np.isfinite(values)]
    return [] if v.size == 0 else [round(float(x), 2) for x in np.quantile(v, QUANTILES)]


def _mean_live_mape(policy: dict[str, Any], target: str) -> float | None:
    bins: list[dict[str, float]] = policy.get("live_mape", {}).get(target, [])
    n = sum(b["n"] for b in bins)
    if not n:
        return None
    return round(sum(b["mape"] * b["n"] for b in bins) / n, 4)


def met_slo(result: SimResult, slo: Slo) -> npt.NDArray[np.bool_]:
    """Per request: completed within both SLOs (a one-token answer has no TPOT to miss)."""
    tpot_ok = (result.output <= 1) | (result.tpot_ms <= slo.tpot_ms)
    met: npt.NDArray[np.bool_] = np.isfinite(result.done) & (result.ttft_ms <= slo.ttft_ms)
    return met & tpot_ok


def summarize(result: SimResult, slo: Slo) -> dict[str, Any]:
    """Per-run figures: latency percentiles (ms), SLO attainment, goodput, hit rate, predictor."""
    n = int(result.arrival.shape[0])
    ttft, tpot, e2e = result.ttft_ms, result.tpot_ms, result.e2e_ms
    completed = np.isfinite(result.done)
    met = met_slo(result, slo)
    span = float(result.arrival.max() - result.arrival.min()) if n > 1 else 0.0
    hits = result.hit_tokens >= 0
    prompt_tokens = int(result.prompt[hits].sum())
    out_tokens = int(result.output[completed].sum())
    policy = result.policy
    return {
        "requests": n,
        "completed": int(completed.sum()),
        "shed": int(result.shed.sum()),
        "ttft_ms": _pcts(ttft),
        "tpot_ms": _pcts(tpot),
        "e2e_ms": _pcts(e2e),
        "slo_attainment": round(float(met.sum()) / n, 4) if n else None,
        "ttft_slo_attainment": round(float((completed & (ttft <= slo.ttft_ms)).sum()) / n, 4)
        if n
        else None,
        "goodput_rps": round(float(met.sum()) / span, 3) if span > 0 else None,
        "throughput_rps": round(float(completed.sum()) / span, 3) if span > 0 else None,
        "output_tokens_per_s": round(out_tokens / span, 1) if span > 0 else None,
        # Not attainment in disguise: long answers weigh more, and a policy that meets the SLO
        # only for short requests scores low here.
        "slo_output_tokens_per_s": round(int(result.output[met].sum()) / span, 1)
        if span > 0
        else None,
        "prefix_hit_rate": round(int(result.hit_tokens[hits].sum()) / prompt_tokens, 4)
        if prompt_tokens
        else None,
        "preemptions": sum(p["preemptions"] for p in result.pods),
        "transfer_ms": _pcts(result.transfer_ms) if np.isfinite(result.transfer_ms).any() else None,
        "predictor_live_mape": {
            "ttft": _mean_live_mape(policy, "ttft"),
            "tpot": _mean_live_mape(policy, "tpot"),
        },
        "wall_s": round(result.wall_s, 2),
        "events": result.events,
        "ttft_quantiles_ms": _quantiles(ttft),
        "e2e_quantiles_ms": _quantiles(e2e),
        "pods": result.pods,
        "policy_detail": policy,
    }


def _s(ms: float | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.2f}"


def _ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.0f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown_table(results: Sequence[dict[str, Any]]) -> str:
    """One row per (load, policy): latencies in s (TTFT, E2E) and ms (TPOT)."""
    head = (
        "| load | policy | TTFT p50 / p90 / p99 (s) | TPOT p50 / p90 (ms) "
        "| E2E p50 / p90 / p99 (s) | SLO met % | goodput (req/s) | shed | prefix hit % "
        "| live MAPE TTFT / TPOT % |\n"
        "|---:|---|---|---|---|---:|---:|---:|---:|---|\n"
    )
    lines = []
    for r in results:
        t, p, e = r["ttft_ms"], r["tpot_ms"], r["e2e_ms"]
        mape = r["predictor_live_mape"]
        lines.append(
            f"| {r['load']:g} | {r['policy']} "
            f"| {_s(t['p50'])} / {_s(t['p90'])} / {_s(t['p99'])} "
            f"| {_ms(p['p50'])} / {_ms(p['p90'])} "
            f"| {_s(e['p50'])} / {_s(e['p90'])} / {_s(e['p99'])} "
            f"| {_pct(r['slo_attainment'])} | {r['goodput_rps']} | {r['shed']} "
            f"| {_pct(r['prefix_hit_rate'])} | {_pct(mape['ttft'])} / {_pct(mape['tpot'])} |"
        )
    return head + "\n".join(lines) + "\n"


def write_plots(data: dict[str, Any], out_dir: Path, prefix: str = "") -> list[Path]:
    """Latency CDFs at the highest load, SLO attainment and TTFT p90 against load (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results: list[dict[str, Any]] = data["results"]
    policies = list(dict.fromkeys(r["policy"] for r in results))
    loads = sorted({r["load"] for r in results})
    title = f"{data['config']['trace']}, {data['pool']['summary']}"
    written = []
    top = loads[-1]
    for key, label in (("ttft_quantiles_ms", "TTFT"), ("e2e_quantiles_ms", "E2E latency")):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in policies:
            row = next((r for r in results if r["policy"] == name and r["load"] == top), None)
            if row and row[key]:
                ax.plot(np.asarray(row[key]) / 1000.0, QUANTILES, label=name)
        ax.set_xscale("log")
        ax.set_xlabel(f"{label} (s, log scale)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{label} CDF at load x{top:g}\n{title}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        path = out_dir / f"{prefix}cdf_{'ttft' if key.startswith('ttft') else 'e2e'}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    for metric, label, scale, fname in (
        ("slo_attainment", "SLO attainment (%)", 100.0, "slo_vs_load.png"),
        ("ttft_p90", "TTFT p90 (s, log scale)", 0.001, "ttft_p90_vs_load.png"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name in policies:
            xs, ys = [], []
            for load in loads:
                row = next((r for r in results if r["policy"] == name and r["load"] == load), None)
                if row is None:
                    continue
                value = row["ttft_ms"]["p90"] if metric == "ttft_p90" else row[metric]
                if value is not None:
                    xs.append(load)
                    ys.append(value * scale)
            ax.plot(xs, ys, marker="o", label=name)
        if metric == "ttft_p90":
            ax.set_yscale("log")
        ax.set_xlabel("load (x the trace's request rate)")
        ax.set_ylabel(label)
        ax.set_title(f"{label} against load\n{title}", fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        path = out_dir / f"{prefix}{fname}"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    mape = _mape_plot(data, out_dir, prefix)
    if mape is not None:
        written.append(mape)
    return written


def _mape_plot(data: dict[str, Any], out_dir: Path, prefix: str) -> Path | None:
    """Live TTFT MAPE per minute of the predicted-latency policies at the highest load."""
    import matplotlib.pyplot as plt

    results: list[dict[str, Any]] = data["results"]
    top = max(r["load"] for r in results)
    series = [
        (r["policy"], r["policy_detail"]["live_mape"]["ttft"])
        for r in results
        if r["load"] == top and r.get("policy_detail", {}).get("live_mape", {}).get("ttft")
    ]
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, bins in series:
        ax.plot([b["time_s"] / 60.0 for b in bins], [100.0 * b["mape"] for b in bins], label=name)
    ax.set_xlabel("simulated time (min)")
    ax.set_ylabel("TTFT prediction error, MAPE per minute (%)")
    ax.set_title(
        f"Online predictor, live error at load x{top:g}\n{data['config']['trace']}", fontsize=9
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    path = out_dir / f"{prefix}mape_over_time.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
