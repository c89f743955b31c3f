from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

from backend.predictor.artifacts import MAGIC, ArtifactError, decode_envelope
from backend.predictor.evaluation import evaluate
from backend.predictor.features import (
    TTFT_BASE_FEATURES,
    TTFT_FEATURES,
    feature_matrix,
    ttft_features,
)
from backend.predictor.regressors import (
    HybridModel,
    LatencyModel,
    TrainParams,
    XGBoostModel,
    fit_nonnegative,
    load_model,
    make_model,
)
from tests.unit.predictor.synthetic import Batch, sample


@pytest.fixture(scope="module")
def short_prompts() -> Batch:
    return sample(2000, np.random.default_rng(1), max_input=1024)


@pytest.fixture(scope="module")
def fitted(short_prompts: Batch) -> dict[str, LatencyModel]:
    X = ttft_features(short_prompts.cols)
    models: dict[str, LatencyModel] = {}
    for kind in ("hybrid", "xgboost"):
        for objective in ("mean", "quantile"):
            model = make_model(
                kind,
                TTFT_FEATURES,
                base_features=TTFT_BASE_FEATURES,
                objective=objective,
            )
            models[f"{kind}/{objective}"] = model.fit(X, short_prompts.ttft)
    return models


def test_hybrid_follows_the_trend_beyond_the_training_range(
    fitted: dict[str, LatencyModel],
) -> None:
    long_prompts = sample(2000, np.random.default_rng(2), min_input=2048, max_input=4096)
    X = ttft_features(long_prompts.cols)
    hybrid = evaluate(long_prompts.ttft_true, fitted["hybrid/mean"].predict(X))
    trees = evaluate(long_prompts.ttft_true, fitted["xgboost/mean"].predict(X))
    assert abs(hybrid.median_bias) < 0.05
    # Trees cannot predict above the largest label they saw.
    assert trees.median_bias < -0.30


def test_hybrid_is_accurate_in_range(fitted: dict[str, LatencyModel]) -> None:
    batch = sample(2000, np.random.default_rng(3), max_input=1024)
    metrics = evaluate(batch.ttft_true, fitted["hybrid/mean"].predict(ttft_features(batch.cols)))
    assert metrics.mape < 0.03  # labels carry 3 % noise; the truth is noise-free


def test_quantile_model_covers_about_its_quantile() -> None:
    rng = np.random.default_rng(4)
    train, test = sample(3000, rng, noise=0.2), sample(3000, rng, noise=0.2)
    model = HybridModel(TTFT_FEATURES, base_features=TTFT_BASE_FEATURES, objective="quantile")
    model.fit(ttft_features(train.cols), train.ttft)
    metrics = evaluate(test.ttft, model.predict(ttft_features(test.cols)), quantile=0.9)
    assert metrics.coverage is not None
    assert 0.85 <= metrics.coverage <= 0.95


@pytest.mark.parametrize("name", ["hybrid/mean", "hybrid/quantile", "xgboost/mean"])
def test_artifact_round_trip_gives_identical_predictions(
    fitted: dict[str, LatencyModel], name: str
) -> None:
    model = fitted[name]
    X = ttft_features(sample(300, np.random.default_rng(5), max_input=8192).cols)
    for encoding in ("ubj", "json"):
        loaded = load_model(model.to_artifact(encoding=encoding))
        assert type(loaded) is type(model)
        assert (loaded.kind, loaded.objective, loaded.quantile) == (
            model.kind,
            model.objective,
            model.quantile,
        )
        assert loaded.feature_names == model.feature_names
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_artifact_is_json_header_plus_native_xgboost_model(
    fitted: dict[str, LatencyModel],
) -> None:
    model = fitted["hybrid/mean"]
    data = model.to_artifact()
    assert data.startswith(MAGIC)
    header, payload = decode_envelope(data)
    assert header["kind"] == "hybrid" and header["booster_encoding"] == "ubj"
    assert set(header["base"]["coefficients"]) == set(TTFT_BASE_FEATURES)
    # The payload is XGBoost's own format: XGBoost alone can load it, no pickle involved.
    booster = xgb.Booster()
    booster.load_model(bytearray(payload))
    assert booster.num_boosted_rounds() == model.params.n_estimators
    _, json_payload = decode_envelope(model.to_artifact(encoding="json"))
    assert "learner" in json.loads(json_payload)


def test_loading_checks_the_kind(fitted: dict[str, LatencyModel]) -> None:
    data = fitted["xgboost/mean"].to_artifact()
    assert isinstance(LatencyModel.from_artifact(data), XGBoostModel)
    with pytest.raises(ArtifactError, match="xgboost"):
        HybridModel.from_artifact(data)


def test_predictions_are_never_negative(fitted: dict[str, LatencyModel]) -> None:
    rng = np.random.default_rng(6)
    extreme = rng.uniform(0, 1, (500, len(TTFT_FEATURES))).astype(np.float32)
    extreme[:250] *= 1e6
    for model in fitted.values():
        assert np.all(model.predict(extreme) >= 0)
    # Tiny labels with noise would pull a plain regressor's leaves below zero.
    X = rng.random((400, len(TTFT_FEATURES)), dtype=np.float32)
    y = np.abs(rng.normal(0.0, 0.01, 400)) + 1e-4
    tiny = XGBoostModel(TTFT_FEATURES, params=TrainParams(n_estimators=5, learning_rate=1.0))
    assert np.all(tiny.fit(X, y).predict(X - 5.0) >= 0)


def test_model_introspection(fitted: dict[str, LatencyModel]) -> None:
    hybrid = fitted["hybrid/mean"]
    assert isinstance(hybrid, HybridModel)
    assert (hybrid.kind, hybrid.objective, hybrid.quantile) == ("hybrid", "mean", 0.9)
    coefficients = hybrid.coefficients()
    assert set(coefficients) == {"intercept", *TTFT_BASE_FEATURES}
    assert all(value >= 0 for value in coefficients.values())
    importance = hybrid.feature_importance()
    assert set(importance) == set(TTFT_FEATURES)
    assert sum(importance.values()) == pytest.approx(1.0)
    dump = fitted["xgboost/mean"].tree_dump()
    assert len(dump) == TrainParams.upstream().n_estimators
    assert {"nodeid", "children"} <= set(dump[0])


def test_hybrid_trend_is_monotone_in_every_cost_driver(fitted: dict[str, LatencyModel]) -> None:
    hybrid = fitted["hybrid/mean"]
    assert isinstance(hybrid, HybridModel)
    X = ttft_features(sample(200, np.random.default_rng(7)).cols)
    base = hybrid.base_predict(X)
    for name in TTFT_BASE_FEATURES:
        more = X.copy()
        more[:, TTFT_FEATURES.index(name)] += 1000
        assert np.all(hybrid.base_predict(more) >= base)


def test_fit_and_predict_validate_their_input() -> None:
    model = HybridModel(TTFT_FEATURES)
    X = np.ones((3, len(TTFT_FEATURES)), dtype=np.float32)
    with pytest.raises(ValueError, match="> 0"):
        model.fit(X, [1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="labels"):
        model.fit(X, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="not fitted"):
        model.predict(X)
    model.fit(X, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="feature matrix"):
        model.predict(X[:, :3])
    with pytest.raises(ValueError, match="base features"):
        HybridModel(TTFT_FEATURES, base_features=["nope"])
    with pytest.raises(ValueError, match="objective"):
        make_model("hybrid", TTFT_FEATURES, objective="median")  # type: ignore[arg-type]


def test_a_handful_of_samples_gives_a_usable_model() -> None:
    batch = sample(10, np.random.default_rng(8))
    model = HybridModel(TTFT_FEATURES, base_features=TTFT_BASE_FEATURES)
    model.fit(feature_matrix("ttft", batch.cols), batch.ttft)
    predictions = model.predict(feature_matrix("ttft", sample(100, np.random.default_rng(9)).cols))
    assert np.all(np.isfinite(predictions)) and np.all(predictions > 0)


def test_nonnegative_fit_recovers_slopes_and_clamps_negative_ones() -> None:
    rng = np.random.default_rng(10)
    drivers = rng.uniform(0, 100, (500, 3))
    y = 5.0 + drivers @ np.array([2.0, 0.5, 0.0])
    intercept, slopes = fit_nonnegative(drivers, y)
    assert intercept == pytest.approx(5.0, rel=1e-6)
    np.testing.assert_allclose(slopes, [2.0, 0.5, 0.0], atol=1e-6)
    # A driver that lowers latency gets no credit: the trend must never fall with more work.
    _, slopes = fit_nonnegative(drivers, 500.0 - drivers[:, 0] + drivers[:, 1])
    assert slopes[0] == 0.0 and slopes[1] > 0
