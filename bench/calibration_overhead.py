"""Hot-path cost of the residual calibration on the served predictions. Prints JSON.

    .venv/bin/python bench/calibration_overhead.py

For 100 rows and both targets, what ``predictor.serving.predict_both`` adds to the trees'
predictions since the live calibration (a correction of each mean and its p90: one banding of
the rows and two gathers per target, ``Calibration.at``) against the p90-only path before it
(one factor for TPOT). An 8-band live calibration, as the trainer fits on 2,000 live rows.
Minimum over repeats of the process's CPU time (``time.process_time``: on a shared machine wall
time measures the other processes), microseconds per call; compare the two within a run.
"""

from __future__ import annotations

import json
import os
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.predictor.calibration import (
    LIVE_BANDS,
    LIVE_MIN_ROWS_PER_BAND,
    column_load,
    fit_calibration,
)
from bench._common import machine

CALLS = 5000
REPEATS = 7


def main() -> None:
    rng = np.random.default_rng(0)
    load = rng.integers(0, 30, 2000).astype(np.float64)
    actual = rng.lognormal(0.0, 0.3, 2000) * (20.0 + load)
    cal = fit_calibration(
        load, actual, 20.0 + load, 0.9, LIVE_BANDS, LIVE_MIN_ROWS_PER_BAND, correct=True
    )
    assert cal is not None
    cols = {
        "num_request_running": rng.integers(0, 20, 100).astype(np.float64),
        "num_request_waiting": rng.integers(0, 5, 100).astype(np.float64),
    }
    raw = rng.random(100) * 100.0

    def before() -> Any:
        return raw * cal.factor(column_load(cols))

    def after() -> Any:
        rows = column_load(cols)
        out = []
        for _ in range(2):  # both targets
            mean_factor, upper = cal.at(rows)
            mean = raw * mean_factor
            out.append((mean, mean * upper))
        return out

    figures = {
        name: round(
            min(timeit.repeat(f, number=CALLS, repeat=REPEATS, timer=time.process_time))
            / CALLS
            * 1e6,
            1,
        )
        for name, f in (("p90_only_before_us", before), ("means_and_both_p90s_after_us", after))
    }
    load_avg = [round(x, 1) for x in os.getloadavg()]
    print(
        json.dumps(
            {
                "machine": {**machine(), "load_average": load_avg},
                "rows": 100,
                "bands": len(cal.correction),
                **figures,
            }
        )
    )


if __name__ == "__main__":
    main()
