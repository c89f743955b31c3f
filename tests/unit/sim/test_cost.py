"""The tabulated step costs agree with the measured profile they are built from."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np
import pytest

from backend.sim.cost import StepCost
from backend.sim.gpu import GpuProfile, available_profiles, load_profile, profiles_dir


@pytest.fixture(params=available_profiles())
def profile(request: pytest.FixtureRequest) -> GpuProfile:
    return load_profile(request.param)


def test_prefill_attention_matches_profile(profile: GpuProfile) -> None:
    cost = StepCost(profile, 131_072)
    for new in (1, 7, 16, 100, 512, 2048, 8192):
        for cached in (0, 1, 300, 4096, 60_000, 120_000):
            want = float(profile.prefill_attention_ms(new, cached))
            assert cost.prefill_attention(new, cached) == pytest.approx(want, rel=2e-3)


def test_step_matches_iteration(profile: GpuProfile) -> None:
    cost = StepCost(profile, 131_072)
    for chunk, cached, batch, kv in (
        (512, 0, 0, 0),
        (1500, 4096, 8, 8 * 3000),
        (16, 0, 30, 30 * 900),
    ):
        want = float(profile.iteration_ms(chunk, cached, batch, kv / max(batch, 1)))
        assert cost.step([(chunk, cached)], batch, kv) == pytest.approx(want, rel=5e-3)


def test_decode_run_matches_decode_steps(profile: GpuProfile) -> None:
    cost = StepCost(profile, 131_072)
    run = cost.decode_run(16, 16 * 2000, 5)
    want = profile.decode_step_ms(16, 2000 + np.arange(5))
    np.testing.assert_allclose(run, want, rtol=1e-9)
    assert cost.step([], 16, 16 * 2000) == pytest.approx(float(want[0]), rel=5e-3)


def test_more_work_never_costs_less(profile: GpuProfile) -> None:
    cost = StepCost(profile, 131_072)
    chunks = [cost.step([(n, 1000)], 8, 8 * 1000) for n in range(1, 2000, 37)]
    assert all(b >= a for a, b in itertools.pairwise(chunks))


def test_decode_attention_run_is_the_grid_bit_for_bit(profile: GpuProfile) -> None:
    # The fast path must not move a single simulated latency: equal, not approximately equal,
    # below the first KV knot, between knots and beyond the last one (extrapolated).
    rng = np.random.default_rng(7)
    for batch in (1, 2, 3, 17, 64, 255, profile.max_num_seqs, 2 * profile.max_num_seqs):
        for start in (0.5, 9.0, 700.0, 31_000.0, 400_000.0):
            mean = start + np.arange(int(rng.integers(1, 300)), dtype=np.float64)
            want = profile.decode_attention_ms(batch, mean)
            assert np.array_equal(profile.decode_attention_run(batch, mean), want)
            assert np.array_equal(profile.decode_attention_run(batch, mean), want)  # kept row


def test_decode_attention_run_wants_a_batch(profile: GpuProfile) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        profile.decode_attention_run(0, np.array([100.0]))


def test_scaled_step_costs_share_the_profiles_decode_memo(profile: GpuProfile) -> None:
    # The memo holds unscaled attention: a pod with other scales reads the same entries and
    # applies its own factor, so sharing it changes no cost.
    plain, slow = StepCost(profile, 131_072), StepCost(profile, 131_072, decode_scale=2.0)
    a = plain.step([], 12, 12 * 5000)
    b = slow.step([], 12, 12 * 5000)
    assert b == pytest.approx(2.0 * a, rel=1e-12)
    fresh = StepCost(GpuProfile.from_json(_profile_json(profile.name)), 131_072)
    assert fresh.step([], 12, 12 * 5000) == a


def _profile_json(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((profiles_dir() / f"{name}.json").read_text())
    return data
