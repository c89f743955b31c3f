"""The scheduling library's policy and the API's policy spec must agree: one set of defaults."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.policies.mapping import to_scheduling
from backend.policies.schemas import PolicySpec
from backend.scheduling.types import SchedulingPolicy


def test_the_api_defaults_are_the_scheduling_defaults() -> None:
    assert to_scheduling(PolicySpec()) == SchedulingPolicy()


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
