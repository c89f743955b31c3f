"""Heterogeneous pools: one model learns each pod class's speed from the samples' pod_class."""

from __future__ import annotations

from typing import Any

import numpy as np

from backend.predictor.evaluation import evaluate
from backend.predictor.regressors import load_model
from backend.predictor.training import predict_columns, train_target
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows


def mixed_pool(n: int, seed: int) -> dict[str, Any]:
    """Half the rows from A100 pods, half from H100 pods, labelled with their class."""
    rng = np.random.default_rng(seed)
    parts = []
    for name in ("a100-llama2-7b", "h100-llama2-7b"):
        rows = sample_rows(n // 2, rng, load_profile(name))
        rows["pod_class"] = np.array([name.split("-")[0]] * (n // 2), dtype=object)
        parts.append(rows)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_predictions_follow_the_pod_class() -> None:
    train = mixed_pool(4000, seed=1)
    test = mixed_pool(2000, seed=2)
    held_out = np.zeros(4000, dtype=bool)
    aware = train_target("ttft", train, train["actual_ttft_ms"], held_out).model
    blind_cols = {k: v for k, v in train.items() if k != "pod_class"}
    blind = train_target("ttft", blind_cols, train["actual_ttft_ms"], held_out).model
    assert aware.classes == ("a100", "h100")

    aware_mape = evaluate(test["ttft_true_ms"], predict_columns(aware, "ttft", test)).mape
    test_blind = {k: v for k, v in test.items() if k != "pod_class"}
    blind_mape = evaluate(test["ttft_true_ms"], predict_columns(blind, "ttft", test_blind)).mape
    assert aware_mape < 0.05
    assert aware_mape < 0.5 * blind_mape  # a pool-wide model averages two speeds

    # The same request on the same load: the H100 pod is predicted faster.
    one = {k: v[:1] for k, v in test.items()}
    a100 = predict_columns(aware, "ttft", {**one, "pod_class": np.array(["a100"], dtype=object)})
    h100 = predict_columns(aware, "ttft", {**one, "pod_class": np.array(["h100"], dtype=object)})
    assert h100[0] < a100[0]


def test_class_vocabulary_survives_the_artifact_and_unknown_classes_fall_back() -> None:
    train = mixed_pool(1000, seed=3)
    model = train_target("tpot", train, train["actual_tpot_ms"], np.zeros(1000, bool)).model
    loaded = load_model(model.to_artifact())
    assert loaded.classes == ("a100", "h100")
    rows = {k: v[:5] for k, v in train.items()}
    np.testing.assert_array_equal(
        predict_columns(model, "tpot", rows), predict_columns(loaded, "tpot", rows)
    )
    unknown = {**rows, "pod_class": np.array(["b200"] * 5, dtype=object)}
    assert np.all(np.isfinite(predict_columns(loaded, "tpot", unknown)))


def test_a_ttft_model_measures_each_class_prefill_rate_and_keeps_it_in_the_artifact() -> None:
    train = mixed_pool(4000, seed=4)
    model = train_target("ttft", train, train["actual_ttft_ms"], np.zeros(4000, bool)).model
    assert model.prefill_rates["h100"] > model.prefill_rates["a100"] > 0
    loaded = load_model(model.to_artifact())
    assert loaded.prefill_rates == model.prefill_rates
    busy = {
        **{k: v[:50] for k, v in train.items()},
        "oldest_prefill_wait_ms": np.full(50, 30.0),
    }
    np.testing.assert_array_equal(
        predict_columns(model, "ttft", busy), predict_columns(loaded, "ttft", busy)
    )
    tpot = train_target("tpot", train, train["actual_tpot_ms"], np.zeros(4000, bool)).model
    assert tpot.prefill_rates == {}
