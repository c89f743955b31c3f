"""The tabulated step costs agree with the measured profile they are built from."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from backend.sim.cost import StepCost
from backend.sim.gpu import GpuProfile, available_profiles, load_profile


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
