"""predicted-latency-producer headroom rules (upstream prediction.go validatePrediction)."""

from __future__ import annotations

import numpy as np
import pytest

from backend.scheduling.headroom import compute_headroom
from backend.scheduling.state import Features
from backend.scheduling.types import SchedulingPolicy, SchedulingRequest

from .helpers import pod


def headroom_of(
    *,
    ttft: float = 100.0,
    tpot: float = 20.0,
    ttft_slo: float | None = 300.0,
    tpot_slo: float | None = 30.0,
    stream: bool = True,
    streaming_mode: bool = True,
    role: str = "",
    running_slos: tuple[float, ...] = (),
    buffer: float = 1.0,
) -> tuple[float, float, bool, bool]:
    f = Features.of([pod("a", role=role, running_tpot_slos_ms=running_slos)])
    h = compute_headroom(
        f,
        np.array([ttft]),
        np.array([tpot]),
        SchedulingRequest(1000, ttft_slo_ms=ttft_slo, tpot_slo_ms=tpot_slo, stream=stream),
        SchedulingPolicy(slo_buffer_factor=buffer, streaming_mode=streaming_mode),
    )
    return (
        float(h.ttft_headroom[0]),
        float(h.tpot_headroom[0]),
        bool(h.ttft_valid[0]),
        bool(h.tpot_valid[0]),
    )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({}, (200.0, 10.0, True, True), id="producer: headroom = SLO - predicted"),
        pytest.param(
            {"ttft_slo": None},
            (-100.0, 10.0, False, True),
            id="producer: no TTFT SLO header -> SLO 0, headroom = -predicted, invalid",
        ),
        pytest.param(
            {"tpot_slo": None},
            (200.0, -20.0, True, False),
            id="producer: streaming without TPOT SLO -> TPOT SLO 0",
        ),
        pytest.param(
            {"ttft": 300.0},
            (0.0, 10.0, False, True),
            id="producer: valid needs predicted strictly below the SLO",
        ),
        pytest.param(
            {"stream": False, "tpot": 99.0},
            (200.0, 0.0, True, True),
            id="producer: TPOT neutral (valid, headroom 0) when the request does not stream",
        ),
        pytest.param(
            {"streaming_mode": False, "tpot": 99.0},
            (200.0, 0.0, True, True),
            id="producer: TPOT neutral when streamingMode is off",
        ),
        pytest.param(
            {"role": "prefill", "tpot": 99.0},
            (200.0, 0.0, True, True),
            id="producer: TPOT neutral on prefill-role pods",
        ),
        pytest.param(
            {"buffer": 1.5},
            (200.0, 25.0, True, True),
            id="producer: buffered TPOT SLO = SLO * sloBufferFactor",
        ),
        pytest.param(
            {"running_slos": (25.0, 40.0)},
            (200.0, 5.0, True, True),
            id="producer: min running TPOT SLO tightens the request's",
        ),
        pytest.param(
            {"running_slos": (25.0,), "buffer": 2.0},
            (200.0, 30.0, True, True),
            id="producer: min running TPOT SLO is buffered too (min(30*2, 25*2))",
        ),
        pytest.param(
            {"running_slos": (50.0,)},
            (200.0, 10.0, True, True),
            id="producer: a looser running TPOT SLO does not relax the request's",
        ),
        pytest.param(
            {"tpot_slo": None, "running_slos": (25.0,)},
            (200.0, -20.0, True, False),
            id="producer: min(0, running) keeps a missing TPOT SLO at 0",
        ),
    ],
)
def test_producer_headroom_rules(
    kwargs: dict[str, object], expected: tuple[float, float, bool, bool]
) -> None:
    assert headroom_of(**kwargs) == pytest.approx(expected)  # type: ignore[arg-type]


def test_producer_nan_prediction_means_no_prediction() -> None:
    f = Features.of([pod("a"), pod("b")])
    h = compute_headroom(
        f,
        np.array([np.nan, 100.0]),
        np.array([10.0, np.nan]),
        SchedulingRequest(1000, ttft_slo_ms=300, tpot_slo_ms=30),
        SchedulingPolicy(),
    )
    assert h.has_pred.tolist() == [False, False]
    h = compute_headroom(
        f,
        np.array([np.nan, 100.0]),
        np.array([10.0, np.nan]),
        SchedulingRequest(1000, ttft_slo_ms=300, tpot_slo_ms=30, stream=False),
        SchedulingPolicy(),
    )
    assert h.has_pred.tolist() == [False, True], "a TPOT-less answer is fine where TPOT is neutral"


def test_combined_headroom_uses_policy_weights() -> None:
    f = Features.of([pod("a")])
    h = compute_headroom(
        f,
        np.array([100.0]),
        np.array([20.0]),
        SchedulingRequest(1000, ttft_slo_ms=300, tpot_slo_ms=30),
        SchedulingPolicy(ttft_weight=0.8),
    )
    assert h.combined[0] == pytest.approx(0.8 * 200 + 0.2 * 10)
