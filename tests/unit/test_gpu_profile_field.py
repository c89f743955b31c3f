"""The policy's `gpu_profile`: its names are the shipped profiles, and it decides which the
pool's calibration may pick."""

from __future__ import annotations

import typing

from backend.capacity.desired import pool_profiles
from backend.policies.schemas import GpuProfileName, PolicySpec
from backend.sim.gpu import available_profiles


def test_the_policys_profile_names_are_the_shipped_profiles() -> None:
    assert set(typing.get_args(GpuProfileName)) == {"none", *available_profiles()}


def test_a_named_profile_is_the_only_one_the_calibration_may_pick() -> None:
    assert pool_profiles(PolicySpec()) is None  # every shipped profile
    assert pool_profiles(PolicySpec(gpu_profile="a100-llama3-8b")) == ("a100-llama3-8b",)
