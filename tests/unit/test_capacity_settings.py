"""The desired-replicas job's rate: the look-ahead by default, a rate window in its place."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from backend.settings import CapacitySettings


def test_the_look_ahead_is_the_default_and_a_rate_window_replaces_it() -> None:
    assert CapacitySettings().desired_lead_s == 90.0
    # A deployment that set a rate window (before the look-ahead existed) keeps its rate.
    windowed = CapacitySettings(desired_rate_window_s=60.0)
    assert (windowed.desired_rate_window_s, windowed.desired_lead_s) == (60.0, 0.0)
    # Either one alone, or neither, as asked.
    assert CapacitySettings(desired_lead_s=30.0).desired_lead_s == 30.0
    assert CapacitySettings(desired_lead_s=0.0).desired_lead_s == 0.0
    # Both asked for: refused at start, naming both.
    with pytest.raises(ValidationError, match="desired_rate_window_s and desired_lead_s"):
        CapacitySettings(desired_rate_window_s=60.0, desired_lead_s=30.0)


def test_the_records_delay_must_fall_inside_its_horizon() -> None:
    assert CapacitySettings(record_horizon_s=120.0, record_delay_s=10.0).record_delay_s == 10.0
    with pytest.raises(ValidationError, match="record_delay_s must be below record_horizon_s"):
        CapacitySettings(record_horizon_s=30.0, record_delay_s=30.0)
