"""KV transfer-time model: distance from topology, bytes from uncached tokens, learned fits."""

from __future__ import annotations

import json
import random

import pytest

from backend.scheduling.transfer import TransferModel, distance, kv_transfer_bytes, pair_costs
from backend.scheduling.types import Topology, TransferConfig

from .helpers import pod

A = Topology(host="h1", rack="r1", zone="z1", region="us")


@pytest.mark.parametrize(
    ("b", "expected"),
    [
        pytest.param(Topology("h1", "r1", "z1", "us"), "same_host", id="distance: same host"),
        pytest.param(Topology("h2", "r1", "z1", "us"), "same_rack", id="distance: same rack"),
        pytest.param(Topology("h2", "r2", "z1", "us"), "same_zone", id="distance: same zone"),
        pytest.param(Topology("h2", "r2", "z2", "us"), "same_region", id="distance: same region"),
        pytest.param(Topology("h2", "r2", "z2", "eu"), "cross_region", id="distance: cross region"),
        pytest.param(
            Topology(None, "r1", None, None), "same_rack", id="distance: unknown host, shared rack"
        ),
        pytest.param(None, "same_zone", id="distance: unknown topology -> configured default"),
        pytest.param(
            Topology("h2", "r2"),
            "same_zone",
            id="distance: default never closer than a known difference",
        ),
        pytest.param(Topology(region="eu"), "cross_region", id="distance: known different regions"),
    ],
)
def test_distance(b: Topology | None, expected: str) -> None:
    assert distance(A, b) == expected


def test_distance_default_is_configurable_but_bounded_by_known_differences() -> None:
    assert distance(None, A, default="same_host") == "same_host"
    assert distance(Topology("h2", "r2"), A, default="same_host") == "same_zone"
    assert distance(None, A, default="cross_region") == "cross_region"


def test_kv_bytes_default_is_llama3_8b() -> None:
    """transfer: 2 (K,V) * 32 layers * 8 kv heads * 128 dim * 2 bytes = 131072 bytes per token."""
    assert TransferConfig().kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131072
    assert kv_transfer_bytes(1000, TransferConfig()) == 131_072_000


@pytest.mark.parametrize(
    ("distance_", "ms"),
    [
        ("same_host", 0.5 + 131_072_000 / 50e6),
        ("same_rack", 1.0 + 131_072_000 / 25e6),
        ("same_zone", 2.0 + 131_072_000 / 6e6),
        ("same_region", 5.0 + 131_072_000 / 2e6),
        ("cross_region", 40.0 + 131_072_000 / 0.5e6),
    ],
)
def test_configured_transfer_time_is_latency_plus_bytes_over_bandwidth(
    distance_: str, ms: float
) -> None:
    model = TransferModel()
    assert model.predict_ms(131_072_000, distance_) == pytest.approx(ms)  # type: ignore[arg-type]


def test_pair_costs_use_the_decode_pods_uncached_tokens() -> None:
    """transfer: D pulls only the blocks its own prefix cache lacks (vLLM NIXL)."""
    p = pod("p", role="prefill", topology=Topology("h1", "r1", "z1", "us"))
    cold = pod("d1", role="decode", topology=Topology("h2", "r1", "z1", "us"))
    warm = pod(
        "d2", role="decode", prefix_cache_score=0.75, topology=Topology("h2", "r1", "z1", "us")
    )
    costs = pair_costs([p], [cold, warm], 1000, TransferModel())
    assert costs.kv_bytes.tolist() == [131_072_000, 32_768_000]
    assert costs.distance(0, 0) == "same_rack"
    assert costs.transfer_ms[0].tolist() == pytest.approx(
        [1 + 131_072_000 / 25e6, 1 + 32_768_000 / 25e6]
    )


def test_transfer_model_learns_latency_and_bandwidth_per_distance() -> None:
    """TransferModel: least-squares fit of ms = latency + bytes / bandwidth from samples."""
    model = TransferModel(min_samples=8, forgetting=1.0)
    rng = random.Random(0)
    for _ in range(7):
        size = rng.uniform(1e7, 1e9)
        model.observe(size, "same_rack", 3.0 + size / 12e6 * (1 + rng.uniform(-0.01, 0.01)))
    assert model.coefficients("same_rack")[2] is False, "falls back until min_samples"
    assert model.bandwidth_gbps("same_rack") == pytest.approx(25.0)
    for _ in range(200):
        size = rng.uniform(1e7, 1e9)
        model.observe(size, "same_rack", 3.0 + size / 12e6 * (1 + rng.uniform(-0.01, 0.01)))
    latency, _, learned = model.coefficients("same_rack")
    assert learned
    # The noise is +-1 % of the transfer time, unbiased: 207 samples pin both coefficients down
    # (over seeds 0-19 the fit stays within 0.2 % and 0.04 ms).
    assert model.bandwidth_gbps("same_rack") == pytest.approx(12.0, rel=0.005)
    assert latency == pytest.approx(3.0, abs=0.1)
    assert model.coefficients("same_zone")[2] is False, "other distances keep the constants"


def test_transfer_model_needs_different_sizes_and_a_physical_fit() -> None:
    model = TransferModel(min_samples=3)
    for _ in range(10):
        model.observe(1e8, "same_zone", 20.0)
    assert model.coefficients("same_zone")[2] is False, "one size cannot give a slope"
    shrinking = TransferModel(min_samples=3)
    for size, ms in [(1e8, 50.0), (2e8, 40.0), (3e8, 30.0)]:
        shrinking.observe(size, "same_zone", ms)
    assert shrinking.coefficients("same_zone")[2] is False, "bandwidth must be positive"


def test_transfer_model_clamps_negative_latency_to_zero() -> None:
    model = TransferModel(min_samples=3, forgetting=1.0)
    for size, ms in [(1e8, 5.0), (2e8, 15.0), (3e8, 25.0)]:  # intercept -5
        model.observe(size, "same_host", ms)
    latency, per_byte, learned = model.coefficients("same_host")
    assert learned and latency == 0.0
    assert per_byte == pytest.approx((1e8 * 5 + 2e8 * 15 + 3e8 * 25) / (1e16 + 4e16 + 9e16))


def test_transfer_model_forgets_old_samples() -> None:
    """TransferModel: a congested fabric is relearned as old samples decay."""
    model = TransferModel(min_samples=8, forgetting=0.9)
    for i in range(100):
        model.observe(1e8 * (1 + i % 5), "same_zone", 1e8 * (1 + i % 5) / 6e6)
    for i in range(100):
        model.observe(1e8 * (1 + i % 5), "same_zone", 1e8 * (1 + i % 5) / 2e6)
    assert model.bandwidth_gbps("same_zone") == pytest.approx(2.0, rel=0.01)


def test_transfer_model_round_trips_through_json() -> None:
    model = TransferModel(TransferConfig(same_rack_gbps=40.0), min_samples=2)
    for size, ms in [(1e8, 10.0), (3e8, 20.0), (2e8, 15.5)]:
        model.observe(size, "same_rack", ms)
    data = json.loads(json.dumps(model.to_dict()))
    back = TransferModel.from_dict(data)
    assert back.predict_ms(5e8, "same_rack") == model.predict_ms(5e8, "same_rack")
    assert back.config == model.config
    assert back.predict_ms(5e8, "same_host") == model.predict_ms(5e8, "same_host")


def test_transfer_model_rejects_bad_samples() -> None:
    model = TransferModel()
    with pytest.raises(ValueError):
        model.observe(-1, "same_rack", 1.0)
    with pytest.raises(ValueError):
        model.observe(1, "next_door", 1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        TransferConfig(same_rack_gbps=0)
