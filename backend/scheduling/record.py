"""A pool's saturation level corrected by its own record.

The level forecasts the share of the next requests that will meet the pool's SLOs. Where the
forecast errs the same way for minutes (Azure code's bursts, which a level read from the past
does not see, left it 4-7 points optimistic at 1.0-1.2x saturation: docs/capacity.md), the
pool's own samples show it: each level given is checked against what the requests arriving
while it was in force then measured, and the mean error of the last ``horizon_s`` is taken off
the level now. A level is only checked once ``delay_s`` has passed, so that most of its
requests have finished.

A sample measures one target of an unnamed request (the EPP's TTFT and TPOT samples are not
joined), so the share meeting *both* SLOs cannot be read from them. Each tick therefore also
keeps the share it forecast to meet each SLO alone (``Saturation.meeting_ttft``,
``meeting_tpot``); the record measures each target's share against its forecast, and the
measured joint share is the forecast one scaled by both ratios (the forecast's own dependence
between the two, which comes from the pods' load, kept), held within the bounds the measured
shares set on any joint distribution. Checked offline on the joint share in the simulator
first, then built and measured (docs/capacity.md, "A level corrected by its own record,
built").
"""

from __future__ import annotations

import dataclasses
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from backend.scheduling.saturation import Saturation

HORIZON_S = 300.0
DELAY_S = 30.0
MIN_REQUESTS = 50

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Outcomes:
    """What the pool's samples measured, on the caller's clock in seconds. TTFT samples: when
    each request arrived (its sample's time less its TTFT), how many requests it stands for,
    its TTFT in ms. TPOT samples: when each request's first token came (its sample's time less
    its decode, TPOT x the further tokens) and its TPOT in ms."""

    ttft_at_s: FloatArray
    ttft_weight: FloatArray
    ttft_ms: FloatArray
    tpot_at_s: FloatArray
    tpot_ms: FloatArray


@dataclass(frozen=True, slots=True)
class Tick:
    at_s: float
    meeting: float
    meeting_ttft: float
    meeting_tpot: float


class LevelRecord:
    """The levels one pool was given, newest last, and their bias against its samples."""

    def __init__(
        self,
        horizon_s: float = HORIZON_S,
        delay_s: float = DELAY_S,
        min_requests: int = MIN_REQUESTS,
        bounded: bool = True,
    ) -> None:
        if not 0.0 <= delay_s < horizon_s:
            raise ValueError("delay_s must be in [0, horizon_s)")
        self.horizon_s, self.delay_s, self.min_requests = horizon_s, delay_s, min_requests
        # The measured joint share held within the bounds the measured targets set (False:
        # the ratios' product alone, as first measured; for A/B).
        self.bounded = bounded
        self.ticks: deque[Tick] = deque()

    def add(self, at_s: float, sat: Saturation) -> None:
        """Keep the level given at ``at_s`` (uncorrected: the record is of the forecast)."""
        meeting = 1.0 - (sat.uncorrected_level if sat.uncorrected_level is not None else sat.level)
        if self.ticks and at_s <= self.ticks[-1].at_s:
            return  # a clock that did not move (or went back): the tick in force stays
        self.ticks.append(Tick(at_s, meeting, sat.meeting_ttft, sat.meeting_tpot))
        start = at_s - self.horizon_s
        # The newest tick at or before the window's start is still in force there.
        while len(self.ticks) > 1 and self.ticks[1].at_s <= start:
            self.ticks.popleft()

    def bias(
        self,
        now_s: float,
        outcomes: Outcomes,
        ttft_slo_ms: float | None,
        tpot_slo_ms: float | None,
    ) -> float | None:
        """Forecast less measured share meeting the SLOs, over the requests that arrived from
        ``horizon_s`` to ``delay_s`` ago (None with fewer than ``min_requests`` of either
        target measured, or no tick in force for them)."""
        if not self.ticks:
            return None
        times = np.fromiter((t.at_s for t in self.ticks), np.float64, len(self.ticks))
        lo, hi = now_s - self.horizon_s, now_s - self.delay_s
        ttft_i, ttft_w = _in_force(times, outcomes.ttft_at_s, lo, hi, outcomes.ttft_weight)
        if ttft_w.sum() < self.min_requests:
            return None
        meeting = np.fromiter((t.meeting for t in self.ticks), np.float64, len(self.ticks))
        forecast = float(np.average(meeting[ttft_i], weights=ttft_w))
        measured = forecast
        shares = []  # each target's measured share, for the bounds below
        if ttft_slo_ms is not None:
            met = outcomes.ttft_ms[_inside(outcomes.ttft_at_s, lo, hi)] <= ttft_slo_ms
            ttft = np.fromiter((t.meeting_ttft for t in self.ticks), np.float64, len(self.ticks))
            measured *= _ratio(met, ttft[ttft_i], ttft_w)
            shares.append(float(np.sum(ttft_w * met)) / float(ttft_w.sum()))
        if tpot_slo_ms is not None:
            tpot_i, tpot_w = _in_force(times, outcomes.tpot_at_s, lo, hi, None)
            if tpot_w.sum() < self.min_requests:
                return None
            met = outcomes.tpot_ms[_inside(outcomes.tpot_at_s, lo, hi)] <= tpot_slo_ms
            tpot = np.fromiter((t.meeting_tpot for t in self.ticks), np.float64, len(self.ticks))
            measured *= _ratio(met, tpot[tpot_i], tpot_w)
            shares.append(float(np.sum(tpot_w * met)) / float(tpot_w.sum()))
        if self.bounded and shares:
            # Whatever the joint distribution, the share meeting both SLOs is at most the
            # smaller target's share and at least their sum less 1. The ratios' product can
            # leave those bounds where the forecast's misses of the two targets overlap and
            # were far off (the demo's first minutes: forecast 5 % meeting, measured 82 % and
            # 95 % per target, and the product read all meeting).
            measured = min(max(measured, sum(shares) - (len(shares) - 1)), min(shares))
        return forecast - min(1.0, measured)


def corrected(sat: Saturation, bias: float | None) -> Saturation:
    """``sat`` with its pool level's meeting share less ``bias`` (clipped to [0, 1]); the pods'
    levels are left as forecast. With no bias, ``sat`` unchanged."""
    if bias is None:
        return sat
    meeting = min(1.0, max(0.0, sat.meeting_slo - bias))
    return dataclasses.replace(
        sat,
        level=1.0 - meeting,
        meeting_slo=meeting,
        uncorrected_level=sat.level,
        record_bias=bias,
    )


def _inside(at: FloatArray, lo: float, hi: float) -> npt.NDArray[np.bool_]:
    out: npt.NDArray[np.bool_] = (at >= lo) & (at <= hi)
    return out


def _in_force(
    times: FloatArray, at: FloatArray, lo: float, hi: float, weight: FloatArray | None
) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Per outcome inside [lo, hi], the index of the tick in force when it happened (its
    weight 0 where none was yet)."""
    inside = _inside(at, lo, hi)
    index = np.searchsorted(times, at[inside], side="right") - 1
    w = np.ones(index.size) if weight is None else np.asarray(weight[inside], np.float64)
    w = np.where(index >= 0, w, 0.0)
    return np.maximum(index, 0), w


def _ratio(met: npt.NDArray[np.bool_], forecast: FloatArray, weight: FloatArray) -> float:
    """Measured over forecast share meeting one SLO (1 where nothing was forecast to meet)."""
    predicted = float(np.sum(weight * forecast))
    return float(np.sum(weight * met)) / predicted if predicted > 0.0 else 1.0
