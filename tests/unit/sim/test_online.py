"""The simulator's online predictor runs the service's window and gate, on simulated time."""

from __future__ import annotations

from typing import Any

import numpy as np

from backend.predictor.features import PROGRESS_FIELDS, feature_matrix
from backend.predictor.window import WindowSpec
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from backend.sim.online import FIELDS, OnlinePredictor

PROFILE = load_profile("a100-llama3-8b")


def _wire(rows: dict[str, Any], n: int) -> dict[str, Any]:
    """Generated rows as the router's: a monolithic pod, no progress fields sent."""
    return {**rows, "pod_type": np.zeros(n), **{f: np.zeros(n) for f in PROGRESS_FIELDS}}


def _feed(
    p: OnlinePredictor, n: int, seed: int, scale: float = 1.0, cls: str | None = None
) -> None:
    rows = sample_rows(n, np.random.default_rng(seed), PROFILE)
    wire = _wire(rows, n)
    for i in range(n):
        row = tuple(float(wire[f][i]) for f in FIELDS)
        p.add("ttft", row, float(rows["actual_ttft_ms"][i]) * scale, pod_class=cls)


def test_buckets_are_per_pod_class_as_in_the_service() -> None:
    spec = WindowSpec(kv_step=1.0, prefix_step=1.0, queue_edges=(), cap=5)  # one bucket
    p = OnlinePredictor(spec=spec)
    _feed(p, 20, seed=0, cls="a100")
    _feed(p, 20, seed=1, cls="h100")
    assert p.size("ttft") == 10  # a busy class cannot push the other out


def test_a_burst_of_outliers_does_not_take_the_simulated_model() -> None:
    p = OnlinePredictor(test_fraction=0.2)
    _feed(p, 2000, seed=0)
    p.retrain(now=10.0)
    first = p.models["ttft"]
    assert first is not None and p.history[-1].activated
    _feed(p, 3000, seed=1, scale=50.0)  # a burst far from what the model predicts
    p.retrain(now=20.0)
    record = p.history[-1]
    assert "outlier rows kept out of training" in record.reason
    probe = sample_rows(50, np.random.default_rng(9), PROFILE)
    cols = {f: np.asarray(v, dtype=np.float64) for f, v in _wire(probe, 50).items() if f in FIELDS}
    # Whatever is active now learnt from ordinary rows only: it still predicts the pods.
    ttft, _ = p.predict(cols)
    assert float(np.median(ttft / probe["actual_ttft_ms"])) < 1.5


def _routed(p: OnlinePredictor, n: int, seed: int, optimism: float) -> None:
    """TTFT samples routed by the current model, whose served prediction was ``optimism``
    times too low (a router's winner's curse): the label is the truth, the prediction low."""
    rows = sample_rows(n, np.random.default_rng(seed), PROFILE)
    wire = _wire(rows, n)
    cols = {f: np.asarray(wire[f], dtype=np.float64) for f in FIELDS}
    served, _ = p.predict(cols)
    actual = served / optimism  # what the pods did, against what the router was told
    for i in range(n):
        row = tuple(float(wire[f][i]) for f in FIELDS)
        p.add("ttft", row, float(actual[i]), predicted_ms=float(served[i]))


def test_live_rows_correct_the_served_mean_and_without_them_nothing_changes() -> None:
    for live in (True, False):
        p = OnlinePredictor(test_fraction=0.2, live_calibration=live)
        _feed(p, 1500, seed=0)
        p.retrain(now=10.0)
        model = p.models["ttft"]
        assert model is not None and model.calibration is not None
        assert model.calibration.source == "held_out"
        _routed(p, 1500, seed=1, optimism=0.8)
        p.retrain(now=20.0)
        model = p.models["ttft"]
        assert model is not None and model.calibration is not None
        probe = sample_rows(200, np.random.default_rng(9), PROFILE)
        cols = {
            f: np.asarray(v, dtype=np.float64) for f, v in _wire(probe, 200).items() if f in FIELDS
        }
        ttft, _ = p.predict(cols)
        raw = model.predict(feature_matrix("ttft", cols))
        ratio = float(np.median(ttft / raw))
        if live:
            # The served predictions were 20 % low: the served mean is raised to meet them.
            assert model.calibration.source == "live"
            assert 1.1 < ratio < 1.4
        else:
            assert model.calibration.source == "held_out" and ratio == 1.0


def test_outliers_kept_out_of_training_still_widen_the_live_spread() -> None:
    """A fifth of the routed requests took 5x what the pods otherwise take (a burst's slowest,
    beyond the gate's 3x outlier factor): they do not train, but the served p90 must reach
    them."""
    p = OnlinePredictor(test_fraction=0.2)
    _feed(p, 1500, seed=0)
    p.retrain(now=10.0)
    n = 1500
    rows = sample_rows(n, np.random.default_rng(1), PROFILE)
    wire = _wire(rows, n)
    cols = {f: np.asarray(wire[f], dtype=np.float64) for f in FIELDS}
    served, _ = p.predict(cols)
    slow = np.random.default_rng(2).random(n) < 0.2
    actual = np.asarray(rows["actual_ttft_ms"]) * np.where(slow, 5.0, 1.0)
    for i in range(n):
        row = tuple(float(wire[f][i]) for f in FIELDS)
        p.add("ttft", row, float(actual[i]), predicted_ms=float(served[i]))
    p.retrain(now=20.0)
    assert "outlier rows kept out of training" in p.history[-1].reason
    model = p.models["ttft"]
    assert model is not None and model.calibration is not None
    assert model.calibration.source == "live"
    load = np.asarray(wire["num_request_running"]) + np.asarray(wire["num_request_waiting"])
    upper = model.calibration.upper(load)
    # The slow fifth sits above the 80th percentile of actual / served mean: the p90 is there.
    assert float(np.median(upper)) > 3.0
