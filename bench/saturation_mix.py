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
from typing import Any

import numpy as np


def cells(paths: list[str]) -> list[tuple[str, float, list[tuple[float, float, float]]]]:
    """(trace, relative load, [(next, present, measured) per run])."""
    out = []
    for path in paths:
        with open(path) as f:
            results: dict[str, Any] = json.load(f)["results"]
        for trace, result in results.items():
            for row in result["table"]:
                runs = [
                    (r.get("predicted_next", r["predicted"]), r["predicted_present"], r["measured"])
                    for r in row["runs"]
                ]
                out.append((trace, float(row["relative_load"]), runs))
    return out


def main() -> None:
    table = cells(sys.argv[1:])
    weights = []
    for w in np.round(np.arange(0.0, 1.01, 0.1), 1).tolist():
        gaps = []
        for trace, load, runs in table:
            g = [100 * (w * now + (1 - w) * later - measured) for later, now, measured in runs]
            gaps.append(
                {
                    "trace": trace,
                    "relative_load": load,
                    "gap_points": {
                        "mean": round(float(np.mean(g)), 2),
                        "min": round(min(g), 2),
                        "max": round(max(g), 2),
                    },
                }
            )
        worst = max(abs(c["gap_points"]["mean"]) for c in gaps)
        weights.append({"present_weight": w, "worst_abs_mean_gap": worst, "cells": gaps})
    print(json.dumps({"inputs": sys.argv[1:], "weights": weights}, indent=2))


if __name__ == "__main__":
    main()
