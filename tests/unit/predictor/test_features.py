from __future__ import annotations

import numpy as np
import pytest

from backend.predictor.features import (
    ATTENTION_WEIGHT,
    POOL_RATE,
    PREFILL_RATE_COLUMN,
    PREFILL_RATE_MIN_ROWS,
    PREFILL_RATE_MIN_WINDOW,
    PROGRESS_FIELDS,
    TPOT_BASE_FEATURES,
    TPOT_FEATURES,
    TTFT_BASE_FEATURES,
    TTFT_FEATURES,
    UPSTREAM_TPOT_FEATURES,
    UPSTREAM_TTFT_FEATURES,
    feature_matrix,
    feature_names,
    is_known_role,
    measure_prefill_rates,
    pod_type_codes,
    prefill_rate_column,
    tpot_features,
    ttft_features,
)


def _cols(**overrides: list[float]) -> dict[str, np.ndarray]:
    cols = {
        "kv_cache_percentage": [0.5, 0.1],
        "input_token_length": [1000, 200],
        "num_request_waiting": [2, 0],
        "num_request_running": [8, 1],
        "prefix_cache_score": [0.25, 0.0],
        "prefill_tokens_in_flight": [3000, 0],
        "decode_tokens_in_flight": [9000, 100],
        "num_tokens_generated": [5, 50],
        "pod_type": [2, 0],
    }
    cols.update(overrides)
    return {k: np.asarray(v, dtype=np.float64) for k, v in cols.items()}


def _column(X: np.ndarray, names: tuple[str, ...], name: str) -> np.ndarray:
    return X[:, names.index(name)]


def test_ttft_matrix_shape_dtype_and_derived_columns() -> None:
    X = ttft_features(_cols())
    assert X.dtype == np.float32
    assert X.shape == (2, len(TTFT_FEATURES))
    uncached = _column(X, TTFT_FEATURES, "uncached_tokens")
    np.testing.assert_allclose(uncached, [750, 200])
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "cached_tokens"), [250, 0])
    # 750 new tokens attend to 250 cached ones plus, on average, half of themselves.
    np.testing.assert_allclose(
        _column(X, TTFT_FEATURES, "attention_kpairs"), [750 * 625 / 1000, 200 * 100 / 1000]
    )
    np.testing.assert_allclose(
        _column(X, TTFT_FEATURES, "prefill_compute_tokens"),
        [750 + ATTENTION_WEIGHT * 468.75, 200 + ATTENTION_WEIGHT * 20],
        rtol=1e-6,
    )
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "running_x_uncached_k"), [6.0, 0.2])


def test_tpot_matrix_context_tokens() -> None:
    X = tpot_features(_cols())
    assert X.shape == (2, len(TPOT_FEATURES))
    np.testing.assert_allclose(_column(X, TPOT_FEATURES, "context_tokens"), [1005, 250])


def test_optional_fields_default_to_zero_and_required_ones_are_named() -> None:
    cols = _cols()
    for name in ("prefix_cache_score", "prefill_tokens_in_flight", "pod_type"):
        del cols[name]
    X = ttft_features(cols)
    assert np.all(_column(X, TTFT_FEATURES, "prefill_tokens_in_flight") == 0)
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "uncached_tokens"), [1000, 200])
    del cols["num_request_running"]
    with pytest.raises(ValueError, match="num_request_running"):
        tpot_features(cols)


def test_encoder_tokens_not_matched_count_as_uncached() -> None:
    X = ttft_features(_cols(encoder_input_size=[500, 10], encoder_matched_size=[100, 50]))
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "encoder_uncached_tokens"), [400, 0])


def test_the_pods_progress_enters_the_ttft_trees_only() -> None:
    """The progress fields say where a pod's work stands, not how much there is: the TTFT
    model reads them as sent (0 from a router that sends none), the extrapolating base and the
    TPOT model do not."""
    X = ttft_features(_cols(ms_since_last_token=[12.5, 0], oldest_prefill_wait_ms=[80, 0]))
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "ms_since_last_token"), [12.5, 0])
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "oldest_prefill_wait_ms"), [80, 0])
    assert np.all(_column(ttft_features(_cols()), TTFT_FEATURES, "ms_since_last_token") == 0)
    assert not set(PROGRESS_FIELDS) & set(TTFT_BASE_FEATURES)
    assert not set(PROGRESS_FIELDS) & set(TPOT_FEATURES)


def test_the_prefill_left_ahead_is_estimated_from_how_long_the_pod_has_been_prefilling() -> None:
    """The pod has prefilled its present requests since the later of the oldest one's dispatch
    and its last first token; at the model's measured rate that much of the uncached prompt
    tokens in flight is done. Without a rate, or from a router that sends no progress, nothing
    is done: the estimate is the tokens in flight, the base's driver as without it."""
    X = ttft_features(
        _cols(
            prefill_tokens_in_flight=[3000, 3000],
            oldest_prefill_wait_ms=[200, 200],
            ms_since_last_first_token=[50, 0],  # the second pod has not reported one
            **{PREFILL_RATE_COLUMN: [10.0, 20.0]},  # tokens per ms
        )
    )
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "prefill_busy_ms"), [50, 200])
    np.testing.assert_allclose(_column(X, TTFT_FEATURES, "prefill_left"), [2500, 0])
    for silent in (_cols(), _cols(oldest_prefill_wait_ms=[200, 200])):
        X = ttft_features(silent)
        np.testing.assert_array_equal(
            _column(X, TTFT_FEATURES, "prefill_left"),
            _column(X, TTFT_FEATURES, "prefill_tokens_in_flight"),
        )
    assert "prefill_left" in TTFT_BASE_FEATURES


def _rate_cols(n: int, **overrides: object) -> dict[str, np.ndarray]:
    cols: dict[str, object] = {
        "kv_cache_percentage": np.zeros(n),
        "input_token_length": np.full(n, 2000.0),
        "num_request_waiting": np.zeros(n),
        "num_request_running": np.zeros(n),
        "prefix_cache_score": np.full(n, 0.5),  # 1000 uncached tokens each
        "prefill_tokens_in_flight": np.zeros(n),
    }
    cols.update(overrides)
    return {k: np.asarray(v) for k, v in cols.items()}


def test_the_prefill_rate_is_measured_on_samples_taken_with_the_pod_to_themselves() -> None:
    n = PREFILL_RATE_MIN_WINDOW
    # All but a few rows on a pod already prefilling: their TTFT says nothing of the rate alone.
    in_flight = np.where(np.arange(n) < PREFILL_RATE_MIN_ROWS, 0.0, 5000.0)
    ttft = np.where(in_flight == 0, 100.0, 600.0)  # 1000 tokens in 100 ms alone: 10 per ms
    rates = measure_prefill_rates(
        _rate_cols(n, prefill_tokens_in_flight=in_flight), ttft, np.ones(n, bool)
    )
    assert rates == {POOL_RATE: pytest.approx(10.0)}
    # Rows outside the training set, and too few rows, measure nothing: no rate, no estimate.
    assert measure_prefill_rates(_rate_cols(n), np.full(n, 100.0), np.arange(n) < 5) == {}


def test_a_young_model_gets_no_rate_however_many_of_its_rows_measure_it() -> None:
    # Every row measures the rate, but a model on fewer rows than one window bucket holds is
    # young: it leaned on the estimate and read a cold pool optimistic (the gate's docstring).
    n = PREFILL_RATE_MIN_WINDOW
    young = np.arange(n) < n - 1
    assert measure_prefill_rates(_rate_cols(n), np.full(n, 100.0), young) == {}
    assert measure_prefill_rates(_rate_cols(n), np.full(n, 100.0), np.ones(n, bool)) != {}


def test_each_pod_class_gets_its_own_rate_and_an_unmeasured_one_the_pools() -> None:
    n = PREFILL_RATE_MIN_WINDOW
    classes = np.array(["h100"] * (n - PREFILL_RATE_MIN_ROWS) + ["a100"] * PREFILL_RATE_MIN_ROWS)
    ttft = np.where(classes == "h100", 50.0, 100.0)
    rates = measure_prefill_rates(_rate_cols(n, pod_class=classes), ttft, np.ones(n, bool))
    assert rates["h100"] == pytest.approx(20.0)
    assert rates["a100"] == pytest.approx(10.0)
    assert rates[POOL_RATE] == pytest.approx(n * 1000 / ttft.sum())
    column = prefill_rate_column(["a100", "l4", None], rates, 3)
    np.testing.assert_allclose(column, [10.0, rates[POOL_RATE], rates[POOL_RATE]])
    np.testing.assert_array_equal(prefill_rate_column(None, {}, 2), [0.0, 0.0])


def test_base_features_are_model_features() -> None:
    assert set(TTFT_BASE_FEATURES) <= set(TTFT_FEATURES)
    assert set(TPOT_BASE_FEATURES) <= set(TPOT_FEATURES)
    assert feature_names("ttft") == TTFT_FEATURES
    assert feature_matrix("tpot", _cols()).shape[1] == len(TPOT_FEATURES)


def test_the_plain_xgboost_kind_gets_upstreams_columns_and_none_of_ours() -> None:
    assert feature_names("ttft", "xgboost") == UPSTREAM_TTFT_FEATURES
    assert feature_names("tpot", "xgboost") == UPSTREAM_TPOT_FEATURES
    cols = _cols(prefix_cache_score=[0.25, 0.99], encoder_input_size=[40, 0])
    X = feature_matrix("ttft", cols, "xgboost")
    assert X.shape == (2, len(UPSTREAM_TTFT_FEATURES))
    names = UPSTREAM_TTFT_FEATURES
    assert _column(X, names, "is_queued").tolist() == [1.0, 0.0]
    # (1 - prefix) x prompt, and floor(prefix x 4) kept within upstream's four buckets.
    np.testing.assert_allclose(_column(X, names, "effective_input_tokens"), [750.0, 2.0], rtol=1e-5)
    assert _column(X, names, "prefill_score_bucket").tolist() == [1.0, 3.0]
    assert _column(X, names, "encoder_input_size").tolist() == [40.0, 0.0]
    tpot = feature_matrix("tpot", cols, "xgboost")
    assert _column(tpot, UPSTREAM_TPOT_FEATURES, "num_tokens_generated").tolist() == [5.0, 50.0]
    # What only our router sends, or our trainer derives, does not reach upstream's model.
    ours = {**cols, "ms_since_last_token": np.array([12.5, 3.0]), PREFILL_RATE_COLUMN: np.ones(2)}
    np.testing.assert_array_equal(feature_matrix("ttft", ours, "xgboost"), X)


def test_pod_type_codes_cover_every_llm_d_role() -> None:
    assert pod_type_codes(["", "prefill", "decode", None]).tolist() == [0, 1, 2, 0]
    # Both phases on one pod read as a monolithic pod; the encode roles are one class of their own.
    both = ["prefill-decode", "both", "Prefill_Decode"]
    assert pod_type_codes(both).tolist() == [0, 0, 0]
    encode = ["encode", "encode-prefill", "encode-prefill-decode"]
    assert pod_type_codes(encode).tolist() == [3, 3, 3]
    # A label value nobody knows yet costs no batch: it is read as a monolithic pod.
    assert pod_type_codes(["gpu-a100-mixed"]).tolist() == [0]
    assert not is_known_role("gpu-a100-mixed") and is_known_role("BOTH") and is_known_role(None)
