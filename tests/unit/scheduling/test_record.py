"""The saturation level corrected by its own record (backend/scheduling/record.py)."""

from __future__ import annotations

import numpy as np
import pytest

from backend.scheduling.record import LevelRecord, Outcomes, corrected
from backend.scheduling.saturation import Headroom, Saturation

_NONE = Headroom(100, None, None, None)


def sat(meeting: float, ttft: float | None = None, tpot: float = 1.0) -> Saturation:
    """A level; with one SLO (TTFT) its share meeting it alone is the joint one."""
    ttft = meeting if ttft is None else ttft
    return Saturation(
        1.0 - meeting, meeting, (), _NONE, _NONE, 1, meeting_ttft=ttft, meeting_tpot=tpot
    )


def outcomes(
    ttft: list[tuple[float, float]],
    tpot: list[tuple[float, float]] = (),  # type: ignore[assignment]
    weight: float = 1.0,
) -> Outcomes:
    """(time s, latency ms) per TTFT sample and per TPOT sample."""
    return Outcomes(
        ttft_at_s=np.array([t for t, _ in ttft], np.float64),
        ttft_weight=np.full(len(ttft), weight),
        ttft_ms=np.array([ms for _, ms in ttft], np.float64),
        tpot_at_s=np.array([t for t, _ in tpot], np.float64),
        tpot_ms=np.array([ms for _, ms in tpot], np.float64),
    )


def _mix(start: float, n: int, miss: int, slo: float) -> list[tuple[float, float]]:
    """``n`` samples a second apart from ``start``, the first ``miss`` over ``slo``."""
    return [(start + k, slo * (2.0 if k < miss else 0.5)) for k in range(n)]


def test_the_bias_is_the_forecast_less_what_the_requests_then_measured() -> None:
    record = LevelRecord(horizon_s=300.0, delay_s=30.0, min_requests=50)
    record.add(0.0, sat(0.9))  # one SLO: the joint share is the TTFT one
    # 100 requests from t=10 s, 20 of them over the SLO: 80 % met against 90 % forecast.
    measured = outcomes(_mix(10.0, 100, 20, 1000.0))
    assert record.bias(200.0, measured, 1000.0, None) == pytest.approx(0.9 - 0.8)


def test_with_both_slos_each_target_is_measured_against_its_own_forecast() -> None:
    # The samples are not joined per request: the measured joint share is the forecast one
    # scaled by each target's measured over forecast share.
    record = LevelRecord(min_requests=50)
    record.add(0.0, sat(0.8, ttft=0.9, tpot=0.85))
    ttft = outcomes(_mix(10.0, 100, 19, 1000.0), _mix(10.0, 100, 15, 100.0))
    measured = 0.8 * (0.81 / 0.9) * (0.85 / 0.85)
    assert record.bias(200.0, ttft, 1000.0, 100.0) == pytest.approx(0.8 - measured)


def test_too_few_requests_of_either_target_give_no_bias() -> None:
    record = LevelRecord(min_requests=50)
    record.add(0.0, sat(0.9, tpot=0.9))
    assert record.bias(200.0, outcomes(_mix(10.0, 49, 10, 1000.0)), 1000.0, None) is None
    both = outcomes(_mix(10.0, 100, 10, 1000.0), _mix(10.0, 49, 10, 100.0))
    assert record.bias(200.0, both, 1000.0, 100.0) is None
    # A TTFT sample may stand for several requests (a tick's read cut to the newest rows).
    heavy = outcomes(_mix(10.0, 25, 5, 1000.0), weight=2.0)
    assert record.bias(200.0, heavy, 1000.0, None) == pytest.approx(0.9 - 0.8)


def test_only_requests_old_enough_and_young_enough_count() -> None:
    record = LevelRecord(horizon_s=300.0, delay_s=30.0, min_requests=50)
    record.add(0.0, sat(0.9))
    # Met, inside [now - 300, now - 30] ...
    kept = _mix(400.0, 100, 10, 1000.0)
    # ... and misses outside it: older than the horizon, or too recent to be checked.
    old = _mix(10.0, 60, 60, 1000.0)
    recent = _mix(680.0, 20, 20, 1000.0)
    got = record.bias(700.0, outcomes(old + kept + recent), 1000.0, None)
    assert got == pytest.approx(0.0)
    # Nothing inside: no bias, whatever lies around it.
    assert record.bias(700.0, outcomes(old + recent), 1000.0, None) is None


def test_each_request_is_held_against_the_level_in_force_when_it_arrived() -> None:
    record = LevelRecord(min_requests=50)
    record.add(0.0, sat(1.0))
    record.add(100.0, sat(0.5))
    # 50 requests under the first level, all met; 50 under the second, half met.
    samples = _mix(20.0, 50, 0, 1000.0) + _mix(120.0, 50, 25, 1000.0)
    assert record.bias(300.0, outcomes(samples), 1000.0, None) == pytest.approx(0.0)
    # Arrivals before any level was given count for none.
    early = LevelRecord(min_requests=50)
    early.add(100.0, sat(0.5))
    assert early.bias(300.0, outcomes(_mix(20.0, 60, 0, 1000.0)), 1000.0, None) is None


def test_the_record_forgets_levels_beyond_its_horizon_but_the_one_in_force() -> None:
    record = LevelRecord(horizon_s=300.0, delay_s=30.0)
    for t in range(0, 1000, 5):
        record.add(float(t), sat(0.9))
    assert record.ticks[0].at_s <= 995.0 - 300.0 < record.ticks[1].at_s
    record.add(995.0, sat(0.1))  # the clock did not move: the tick in force stays
    assert record.ticks[-1].meeting == pytest.approx(0.9)
    with pytest.raises(ValueError, match="delay_s"):
        LevelRecord(horizon_s=30.0, delay_s=30.0)


def test_the_correction_moves_the_pools_level_and_keeps_the_forecast_beside_it() -> None:
    level = sat(0.9)
    assert corrected(level, None) is level
    down = corrected(level, 0.05)
    assert (down.meeting_slo, down.level) == pytest.approx((0.85, 0.15))
    assert (down.uncorrected_level, down.record_bias) == pytest.approx((0.1, 0.05))
    assert corrected(level, -0.5).meeting_slo == 1.0  # clipped
    assert corrected(level, 1.5).level == 1.0
    # The record keeps the forecast, not a level already corrected.
    record = LevelRecord()
    record.add(0.0, down)
    assert record.ticks[-1].meeting == pytest.approx(0.9)


def test_the_measured_joint_share_stays_within_what_the_targets_allow() -> None:
    """Far-off forecasts whose misses overlap: the ratios' product reads all meeting, more than
    either target measured. The joint share is at most the smaller target's share and at least
    their sum less 1."""
    ticks = sat(0.04, ttft=0.05, tpot=0.6)
    samples = outcomes(_mix(10.0, 100, 18, 1000.0), _mix(10.0, 100, 5, 100.0))
    bounded, product = LevelRecord(min_requests=50), LevelRecord(min_requests=50, bounded=False)
    for record in (bounded, product):
        record.add(0.0, ticks)
    assert product.bias(200.0, samples, 1000.0, 100.0) == pytest.approx(0.04 - 1.0)
    assert bounded.bias(200.0, samples, 1000.0, 100.0) == pytest.approx(0.04 - 0.82)
    # Within the bounds the product stands: 0.8 x (0.81 / 0.9) x (0.85 / 0.85) = 0.72, in
    # [0.81 + 0.85 - 1, 0.81].
    inside = LevelRecord(min_requests=50)
    inside.add(0.0, sat(0.8, ttft=0.9, tpot=0.85))
    mild = outcomes(_mix(10.0, 100, 19, 1000.0), _mix(10.0, 100, 15, 100.0))
    assert inside.bias(200.0, mild, 1000.0, 100.0) == pytest.approx(0.8 - 0.72)
