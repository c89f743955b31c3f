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
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
