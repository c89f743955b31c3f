"""An online weight for the saturation level's mix, evaluated on recorded calibration runs. JSON.

    .venv/bin/python bench/saturation_online_weight.py RUN.json [RUN.json ...]

The runs are ``bench/saturation_calibration.py``'s with per-probe detail (``probes_detail``:
time, present and next-interval meeting shares, the share measured, requests measured). At each
probe the weight on the present level is refitted on the same run's settled probes (all but the
last ``SETTLE``: their requests have finished), by least squares shrunk to the fixed weight:

    w = (sum d e + lambda s^2 w0) / (sum d^2 + lambda s^2), clipped to [0, 1]

with d = present - next, e = measured - next, w0 the fixed weight (0.6) and s a typical gap
between the parts (0.05), so lambda counts pseudo-probes at the fixed weight. Per lambda: each
(trace, load) cell's gap (predicted - measured, points, weighted by requests as the bench
weighs them), mean (min, max) over seeds, and the worst |mean|; lambda "fixed" is w0 throughout.
"""

from __future__ import annotations

import json
import sys

import numpy as np
from saturation_mix import gap_cell, read_cells

W0 = 0.6
SCALE = 0.05
SETTLE = 2
LAMBDAS: tuple[float, ...] = (1.0, 4.0, 16.0, 64.0)


def online_gap(detail: list[list[float]], lam: float | None) -> float:
    """The run's gap in points with the weight refitted at each probe (``lam`` None: fixed)."""
    a = np.asarray(detail, dtype=np.float64)
    present, later, measured, count = a[:, 1], a[:, 2], a[:, 3], a[:, 4]
    predicted = np.empty_like(present)
    for k in range(len(a)):
        w = W0
        if lam is not None:
            d = present[: max(0, k - SETTLE + 1)] - later[: max(0, k - SETTLE + 1)]
            e = measured[: len(d)] - later[: len(d)]
            prior = lam * SCALE**2
            w = float(np.clip((np.sum(d * e) + prior * W0) / (np.sum(d * d) + prior), 0.0, 1.0))
        predicted[k] = w * present[k] + (1.0 - w) * later[k]
    gap = np.average(predicted, weights=count) - np.average(measured, weights=count)
    return 100.0 * float(gap)


def main() -> None:
    cells = read_cells(sys.argv[1:], lambda run: run["probes_detail"])
    out = []
    for lam in (None, *LAMBDAS):
        table = [
            gap_cell(trace, load, [online_gap(detail, lam) for detail in runs])
            for trace, load, runs in cells
        ]
        worst = max(abs(c["gap_points"]["mean"]) for c in table)
        out.append({"lambda": "fixed" if lam is None else lam, "worst": worst, "cells": table})
    print(json.dumps({"inputs": sys.argv[1:], "weights": out}, indent=2))


if __name__ == "__main__":
    main()
