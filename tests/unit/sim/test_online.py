"""The simulator's online predictor runs the service's window and gate, on simulated time."""

from __future__ import annotations

import numpy as np

from backend.predictor.window import WindowSpec
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from backend.sim.online import FIELDS, OnlinePredictor

PROFILE = load_profile("a100-llama3-8b")


def _feed(
    p: OnlinePredictor, n: int, seed: int, scale: float = 1.0, cls: str | None = None
) -> None:
    rows = sample_rows(n, np.random.default_rng(seed), PROFILE)
    wire = {**rows, "pod_type": np.zeros(n)}
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
    cols = {f: np.asarray(probe[f], dtype=np.float64) for f in FIELDS if f != "pod_type"}
    cols["pod_type"] = np.zeros(50)
    # Whatever is active now learnt from ordinary rows only: it still predicts the pods.
    ttft, _ = p.predict(cols)
    assert float(np.median(ttft / probe["actual_ttft_ms"])) < 1.5
