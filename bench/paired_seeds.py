"""Paired per-seed differences between runs of ``bench/live_accuracy.py`` on the same seeds. JSON.

    .venv/bin/python bench/paired_seeds.py BEFORE.json AFTER.json [NULL.json ...]

A candidate and the code before it run the same seeds, so each (trace, seed) gives one paired
difference. Printed per trace, for AFTER and each NULL (a neutral change: same information,
another path through the bursts) against BEFORE: the mean paired difference of live TTFT MAPE
(every request), of SLO attainment and of the first 120 s' attainment, each with its 95 %
bootstrap interval over the seeds, and the worst seed's drop and move of the first 120 s'
median TTFT bias towards optimism. Guards written as "worse than the neutral change's worst"
read the NULL rows: a worst single seed among many is the tail of the swing, not a harm by
itself (docs/benchmarks.md, "A variant with a gate on the model's age").

With NULL files, ``nulls_envelope`` gives per trace the widest the neutral changes' intervals
reach (the lowest ``lo``, the highest ``hi`` of each mean difference), and ``after_beyond_nulls``
whether AFTER's interval lies wholly below or wholly above that envelope. The NULLs must be
neutral changes of BEFORE's own code: against another BEFORE their differences hold the change
between the two, and the envelope means nothing. A bound on a mean
set inside the envelope can fail a neutral change: the prefill cost curve's third test failed a
-0.5 bound on Mooncake's SLO at -0.56 while a neutral change read -0.67 (docs/benchmarks.md,
"A third test: the curve only where long prompts show it, not kept").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def per_seed(path: str) -> dict[str, dict[int, dict[str, Any]]]:
    """{suite: {seed: the run's per-seed record}} for Headroom's policy."""
    data = json.loads(Path(path).read_text())
    return {
        r["suite"]: {s["seed"]: s for s in r["per_seed"]}
        for r in data["results"]
        if r["policy"] == "headroom"
    }


RESAMPLES = 10_000


def interval(diffs: np.ndarray) -> dict[str, float]:
    """Mean and its 95 % bootstrap percentile interval (10,000 resamples of the seeds, fixed
    generator: the same files always print the same interval)."""
    rng = np.random.default_rng(0)
    means = diffs[rng.integers(0, len(diffs), (RESAMPLES, len(diffs)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {
        "mean": round(float(diffs.mean()), 3),
        "lo": round(float(lo), 3),
        "hi": round(float(hi), 3),
    }


def compare(before: dict[Any, dict[str, Any]], other: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    """Paired over the keys both runs hold: seeds of one trace, or (trace, seed) pooled."""
    seeds = sorted(set(before) & set(other))

    def diff(read: Callable[[dict[str, Any]], float], scale: float = 1.0) -> np.ndarray:
        return scale * np.array([read(other[s]) - read(before[s]) for s in seeds])

    mape = diff(lambda r: r["ttft_live_mape_pct"])
    slo = diff(lambda r: r["slo_attainment"], 100.0)
    early = diff(lambda r: r["early"]["slo_attainment"], 100.0)
    bias = diff(lambda r: r["early"]["ttft_median_bias_pct"])
    return {
        "seeds": len(seeds),
        "ttft_mape_diff": interval(mape),
        "ttft_mape_lower_on": int((mape < 0).sum()),
        "slo_diff": interval(slo),
        "early_slo_diff": interval(early),
        "worst_slo_drop": round(float(-slo.min()), 2),
        "worst_slo_seed": seeds[int(slo.argmin())],
        "worst_early_drop": round(float(-early.min()), 2),
        "worst_early_seed": seeds[int(early.argmin())],
        "worst_bias_to_optimism": round(float(-bias.min()), 2),
        "worst_bias_seed": seeds[int(bias.argmin())],
    }


MEAN_DIFFS = ("ttft_mape_diff", "slo_diff", "early_slo_diff")


def nulls_envelope(nulls: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per mean difference, the lowest ``lo`` and the highest ``hi`` over the neutral changes:
    how far a change that alters no information moved the mean, either way."""
    return {
        key: {"lo": min(n[key]["lo"] for n in nulls), "hi": max(n[key]["hi"] for n in nulls)}
        for key in MEAN_DIFFS
    }


def beyond(after: dict[str, Any], envelope: dict[str, dict[str, float]]) -> dict[str, str]:
    """Per mean difference, "below" or "above" where AFTER's whole interval lies outside the
    nulls' envelope on that side, else "within": only outside it is a move a neutral change
    did not make."""
    out = {}
    for key in MEAN_DIFFS:
        lo, hi = after[key]["lo"], after[key]["hi"]
        out[key] = (
            "below"
            if hi < envelope[key]["lo"]
            else "above"
            if lo > envelope[key]["hi"]
            else "within"
        )
    return out


def pooled_by_trace_and_seed(
    runs: dict[str, dict[int, dict[str, Any]]],
) -> dict[tuple[str, int], dict[str, Any]]:
    return {(suite, seed): r for suite, seeds in runs.items() for seed, r in seeds.items()}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    before = per_seed(argv[0])
    out: dict[str, Any] = {}
    for path in argv[1:]:
        other = per_seed(path)
        out[path] = {suite: compare(before[suite], other[suite]) for suite in before}
        pooled = compare(pooled_by_trace_and_seed(before), pooled_by_trace_and_seed(other))
        out[path]["pooled_ttft_mape_diff"] = pooled["ttft_mape_diff"]
    if len(argv) > 2:
        after, nulls = out[argv[1]], [out[path] for path in argv[2:]]
        envelope = {suite: nulls_envelope([n[suite] for n in nulls]) for suite in before}
        out["nulls_envelope"] = envelope
        out["after_beyond_nulls"] = {
            suite: beyond(after[suite], envelope[suite]) for suite in before
        }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
