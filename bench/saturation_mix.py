"""The saturation level's mix, from recorded calibration runs: gap per (trace, load) cell of
``w * present + (1 - w) * next interval`` for w = 0, 0.1, ..., 1. JSON.

    .venv/bin/python bench/saturation_mix.py docs/results/saturation_tuning_azure_w60_gridfix.json \
        docs/results/saturation_tuning_moon_w60_gridfix.json

Every run of ``bench/saturation_calibration.py`` records both levels of the same simulation
(the probes do not route, so the measured share is one): per run ``predicted_present`` and the
next interval's, ``predicted_next`` (``predicted`` in runs made before the mix, when it was the
replay alone). The level is linear in the weight, so each mix's gap is exact from those, and
the weight can be chosen on a tuning slice without a run per candidate. Per weight: each
cell's gap in points, mean (min, max) over the seeds, and the worst |mean|.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def read_cells(
    paths: list[str], pick: Callable[[dict[str, Any]], T]
) -> list[tuple[str, float, list[T]]]:
    """(trace, relative load, [``pick(run)`` per run]) for every cell of the recorded runs."""
    out = []
    for path in paths:
        with open(path) as f:
            results: dict[str, Any] = json.load(f)["results"]
        for trace, result in results.items():
            for row in result["table"]:
                out.append((trace, float(row["relative_load"]), [pick(r) for r in row["runs"]]))
    return out


def gap_cell(trace: str, load: float, gaps: list[float]) -> dict[str, Any]:
    """One cell's gaps over the seeds, in points: mean, min, max."""
    return {
        "trace": trace,
        "relative_load": load,
        "gap_points": {
            "mean": round(float(np.mean(gaps)), 2),
            "min": round(min(gaps), 2),
            "max": round(max(gaps), 2),
        },
    }


def _levels(run: dict[str, Any]) -> tuple[float, float, float]:
    """(next, present, measured) of one run."""
    return run.get("predicted_next", run["predicted"]), run["predicted_present"], run["measured"]


def main() -> None:
    table = read_cells(sys.argv[1:], _levels)
    weights = []
    for w in np.round(np.arange(0.0, 1.01, 0.1), 1).tolist():
        gaps = [
            gap_cell(trace, load, [100 * (w * now + (1 - w) * later - m) for later, now, m in runs])
            for trace, load, runs in table
        ]
        worst = max(abs(c["gap_points"]["mean"]) for c in gaps)
        weights.append({"present_weight": w, "worst_abs_mean_gap": worst, "cells": gaps})
    print(json.dumps({"inputs": sys.argv[1:], "weights": weights}, indent=2))


if __name__ == "__main__":
    main()
