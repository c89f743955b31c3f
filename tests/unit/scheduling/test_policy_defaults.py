"""The scheduling library's policy and the API's policy spec must agree: one set of upstream
defaults (the library's, the `upstream` preset), and a new pool's that departs from them only
where the fair protocol said to."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from backend.policies.mapping import to_scheduling
from backend.policies.schemas import UPSTREAM_SPEC, PolicySpec
from backend.scheduling.types import SchedulingPolicy


def test_the_upstream_preset_is_the_scheduling_defaults() -> None:
    assert to_scheduling(UPSTREAM_SPEC) == SchedulingPolicy()


def test_a_new_pool_differs_from_upstream_in_the_strategy_only() -> None:
    new, upstream = to_scheduling(PolicySpec()), SchedulingPolicy()
    assert (upstream.strategy, new.strategy) == ("least", "most")
    assert new == dataclasses.replace(upstream, strategy="most")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ttft_weight", 1.01),
        ("ttft_weight", -0.01),
        ("epsilon_explore_neg", 1.5),
        ("strict_affinity_threshold", -0.1),
        ("loose_affinity_threshold", 1.1),
        ("affinity_exploration_probability", 2.0),
        ("fallback_kv_weight", -1.0),
        ("max_ttft_penalty_ms", -1.0),
        ("slo_buffer_factor", 0.0),
        ("expected_output_tokens", 0),
    ],
)
def test_a_value_the_library_refuses_the_api_refuses_too(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SchedulingPolicy.from_dict({field: value})
    with pytest.raises(ValidationError, match=field):
        PolicySpec.model_validate({field: value})
