"""Predictor core: hot-path latency, training time, accuracy and extrapolation. Prints JSON.

    .venv/bin/python bench/predictor_core.py [--quick]

Rows come from the simulator's ground truth (``backend.sim.latency``, measured GPU profiles);
accuracy is scored against the noise-free latency, models are trained on labels with 3 % noise.
Wall-clock figures depend on the machine, which the output states; compare ratios within a run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.predictor.evaluation import evaluate
from backend.predictor.features import Target, feature_matrix
from backend.predictor.regressors import Kind, LatencyModel
from backend.predictor.training import train_target
from backend.sim.gpu import available_profiles, load_profile
from backend.sim.latency import sample_rows

KINDS: tuple[Kind, ...] = ("hybrid", "xgboost")
TARGETS: tuple[Target, ...] = ("ttft", "tpot")
Rows = dict[str, Any]


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "xgboost": xgb.__version__,
    }


def per_call_us(fn: Callable[[], object], calls: int, repeats: int = 7) -> float:
    """Median over repeats of the mean time per call: robust to a neighbour's CPU burst."""
    for _ in range(min(calls, 100)):
        fn()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return round(statistics.median(runs), 1)


def subset(rows: Rows, n: int) -> Rows:
    return {k: v[:n] for k, v in rows.items()}


def fit(target: Target, rows: Rows, kind: Kind) -> LatencyModel:
    n = len(rows["input_token_length"])
    labels = rows[f"actual_{target}_ms"]
    return train_target(target, rows, labels, np.zeros(n, dtype=bool), kind=kind).model


def predict_both(ttft: LatencyModel, tpot: LatencyModel, rows: Rows) -> None:
    """What the API does per call: both feature matrices, both predictions."""
    ttft.predict(feature_matrix("ttft", rows, ttft.kind))
    tpot.predict(feature_matrix("tpot", rows, tpot.kind))


def hot_path(rng: np.random.Generator, profile: Any, calls: int) -> dict[str, Any]:
    train = sample_rows(20_000, rng, profile)
    batch = sample_rows(100, rng, profile)
    big = sample_rows(10_000, rng, profile)
    out: dict[str, Any] = {}
    for kind in KINDS:
        ttft, tpot = fit("ttft", train, kind), fit("tpot", train, kind)
        x_ttft, x_tpot = feature_matrix("ttft", batch, kind), feature_matrix("tpot", batch, kind)
        both = partial(predict_both, ttft, tpot, batch)
        both_us = per_call_us(both, calls)
        big_us = per_call_us(partial(predict_both, ttft, tpot, big), max(calls // 100, 5))
        out[kind] = {
            "trees_per_target": ttft.params.n_estimators,
            "max_depth": ttft.params.max_depth,
            "ttft_predict_us_100_rows": per_call_us(partial(ttft.predict, x_ttft), calls),
            "tpot_predict_us_100_rows": per_call_us(partial(tpot.predict, x_tpot), calls),
            "features_and_both_targets_us_100_rows": both_us,
            "rows_per_s_both_targets_100_row_calls": round(100 / both_us * 1e6),
            "rows_per_s_both_targets_10k_row_calls": round(10_000 / big_us * 1e6),
        }
    return out


def training_time(rng: np.random.Generator, profile: Any, n: int) -> dict[str, Any]:
    rows = sample_rows(n, rng, profile)
    is_test = rng.random(n) < 0.1
    out: dict[str, Any] = {"rows": n, "held_out_share": 0.1}
    for kind in KINDS:
        for target in TARGETS:
            result = train_target(target, rows, rows[f"actual_{target}_ms"], is_test, kind=kind)
            assert result.metrics is not None
            out[f"{kind}/{target}"] = {
                "train_seconds": round(result.train_seconds, 3),
                "n_train": result.n_train,
                "held_out_mape_vs_noisy_labels": round(result.metrics.mape, 4),
            }
    return out


def accuracy(rng: np.random.Generator, profile: Any, n_train: int) -> dict[str, Any]:
    """In-range MAPE, and median bias when trained on prompts <= 1024 tokens only."""
    train, test = sample_rows(n_train, rng, profile), sample_rows(5000, rng, profile)
    short = sample_rows(n_train, rng, profile, max_input_tokens=1024)
    ranges = {
        "1025-2048": sample_rows(5000, rng, profile, min_input_tokens=1025, max_input_tokens=2048),
        ">2048": sample_rows(5000, rng, profile, min_input_tokens=2049),
    }
    out: dict[str, Any] = {}
    for kind in KINDS:
        for target in TARGETS:
            truth = f"{target}_true_ms"
            model = fit(target, train, kind)
            in_range = evaluate(test[truth], model.predict(feature_matrix(target, test, kind)))
            model = fit(target, short, kind)
            bias = {
                name: round(
                    evaluate(
                        rows[truth], model.predict(feature_matrix(target, rows, kind))
                    ).median_bias,
                    4,
                )
                for name, rows in ranges.items()
            }
            out[f"{kind}/{target}"] = {
                "in_range_mape": round(in_range.mape, 4),
                "in_range_p90_ape": round(in_range.p90_ape, 4),
                "trained_le_1024_median_bias": bias,
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls, one profile")
    args = parser.parse_args()
    rng = np.random.default_rng(20260829)
    profiles = available_profiles()[:1] if args.quick else available_profiles()
    hot_profile = load_profile(profiles[0])
    report = {
        "benchmark": "predictor_core",
        "machine": machine(),
        "hot_path": hot_path(rng, hot_profile, 300 if args.quick else 3000),
        "training_100k": training_time(rng, hot_profile, 100_000),
        "accuracy": {
            "train_samples": 3000,
            "label_noise": 0.03,
            "scored_against": "noise-free simulator latency",
            "profiles": {name: accuracy(rng, load_profile(name), 3000) for name in profiles},
        },
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
