"""Pool saturation from predicted latency: would a representative request meet its SLOs now?

The idea of the llm-d ``latency-detector`` proposal (GAIE #2716, llm-d-router #1141), answered
with the learned models instead of hand-tuned queue and KV thresholds: take the requests the
pool has recently served (their prompt lengths and prefix-cache scores), place each of them on
every pod as the pods stand now, and predict TTFT and TPOT there.

- A pod's level is the share of representative requests that would *miss* an SLO on it.
- The pool's level is the share that would miss an SLO when routed by the pool's own chain
  (the same ``schedule`` that ``/v1/schedule`` runs), so affinity, tiers and the strategy count.

Both are in [0, 1]: 0 means every representative request fits, 1 that none does. A request
counts as missing with the probability that it misses (``MeetProbability``: from the models'
residual spread at the pod's load, ``backend.predictor.calibration.meet_probability``), not 0 or
1 from comparing the mean prediction with the SLO: near saturation about half the requests whose
mean just fits miss, and the 0/1 rule counted them all as meeting (optimistic by 10-17 points on
Azure code at 1.0-1.2x saturation, docs/capacity.md). Without it, the 0/1 rule. Exploration of
the negative tier (``epsilon_explore_neg``) is switched off here: it sends a request to a pod
that is predicted to miss on purpose, which says nothing about capacity.

**The next interval.** The pods as they stand hold only the requests already sent; the requests
arriving next meet the queues they build themselves, in bursts above all (a probe at a random
instant mostly sees the calm between bursts, while most requests arrive inside one). With
``Arrivals`` (the pool's recent arrival times and mean output length) those arrivals are
replayed from now onto the pods (``project``): per pod, the requests in the system follow
Little's law as a fluid, each arrival adding its share, passing its first token and then its
decode at the rates the models' own predictions give for a request sharing the pod with the
others. Those rates are scaled to what the pool's recent requests measured at the same count
on their pod (``Served``). The level is the mean of the levels on the states the arrivals find
(at evenly spaced quantiles). With no arrival in the window it is the present level.

**The mix.** The present level is optimistic where bursts follow (it does not see them). With
``present_weight`` between 0 and 1 the level is ``present_weight * present + (1 -
present_weight) * next``; the service's weight (0 since the replay's latency is scaled to the
measured) was chosen on a tuning slice of both traces and reported on another
(``docs/capacity.md``, "The replay's latency calibrated to the pool's own"). Both parts are
kept in the result.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from backend.scheduling.chain import schedule
from backend.scheduling.types import (
    BoolArray,
    Candidate,
    CandidateTrace,
    FloatArray,
    Predictor,
    SchedulingPolicy,
    SchedulingRequest,
)


@dataclass(frozen=True, slots=True)
class Representative:
    """A request as the pool recently saw it."""

    prompt_tokens: int
    prefix_cache_score: float


RowPredictor = Callable[[Sequence[Candidate]], tuple[FloatArray, FloatArray]]
"""(ttft_ms, tpot_ms) for every row; one call for all request x pod rows."""
MeetProbability = Callable[
    [Sequence[Candidate], FloatArray, FloatArray, float | None, float | None], FloatArray
]
"""P(meeting both SLOs) for every row, given its predicted (ttft_ms, tpot_ms) and the SLOs."""


@dataclass(frozen=True, slots=True)
class PodLevel:
    name: str
    level: float  # share of representative requests that would miss an SLO on this pod
    ttft_ms_p50: float  # predicted TTFT of the median representative request here
    tpot_ms_p50: float
    # Requests in the system (running + waiting) the level was computed at: the present ones,
    # or more where the arrival rate is projected to build a queue (``project``).
    requests: float = 0.0


@dataclass(frozen=True, slots=True)
class Headroom:
    """SLO minus predicted latency on the pod the chain picks, for one representative request."""

    prompt_tokens: int
    pod: str | None
    ttft_headroom_ms: float | None
    tpot_headroom_ms: float | None


@dataclass(frozen=True, slots=True)
class Saturation:
    level: float
    meeting_slo: float  # 1 - level
    pods: tuple[PodLevel, ...]
    p50: Headroom
    p90: Headroom
    representatives: int
    arrival_rate_rps: float = 0.0  # the rate the pods were projected at (0: as they stand)
    # The two levels the pool's is made of: the pods as they stand (always set by
    # ``saturation``), and the next interval's (None when nothing was replayed: no arrival in
    # the window, or the weight all on the present one).
    present_level: float | None = None
    next_level: float | None = None
    # The pool's share meeting each SLO alone (1 for a target without one), as ``meeting_slo``
    # is made: what a record of the pool's samples can be checked against, each sample
    # measuring one target (``backend.scheduling.record``).
    meeting_ttft: float = 1.0
    meeting_tpot: float = 1.0
    # Set by a level corrected by its own record (``record.corrected``): the level before it,
    # and the bias taken off its meeting share (None: not corrected).
    uncorrected_level: float | None = None
    record_bias: float | None = None


@dataclass(frozen=True, slots=True)
class Served:
    """What the pool's recent requests measured, by the requests in the system on their pod
    when each was routed (running + waiting in its sample): ``ttft`` pairs that count with the
    seconds to the first token (the TTFT samples), ``tpot`` with the seconds per output token
    (the TPOT samples). The replay's latency tables are scaled to them (``_calibrated``)."""

    ttft: tuple[tuple[float, float], ...] = ()
    tpot: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Arrivals:
    """The traffic the pods' gauges do not hold yet: the pool's recent arrivals, replayed from
    now. ``times_s`` are their arrival times (seconds from the start of the ``window_s`` they
    were seen in, ascending), ``weights`` how many requests each stands for (1 each when every
    arrival was seen), ``output_tokens`` the mean output length of a recent request, and
    ``served`` what recent requests measured (None: the tables as the models give them)."""

    times_s: tuple[float, ...]
    window_s: float
    output_tokens: float
    weights: tuple[float, ...] | None = None
    served: Served | None = None

    @property
    def rate_rps(self) -> float:
        count = sum(self.weights) if self.weights is not None else len(self.times_s)
        return count / self.window_s

    def __post_init__(self) -> None:
        if any(b < a for a, b in zip(self.times_s, self.times_s[1:], strict=False)):
            raise ValueError("times_s must be ascending")
        if self.weights is not None and len(self.weights) != len(self.times_s):
            raise ValueError("one weight per arrival")
        if not self.output_tokens >= 0.0:
            raise ValueError("output_tokens must be >= 0")
        if not self.window_s > 0.0:
            raise ValueError("window_s must be > 0")


LATENCY_REQUESTS = 8
"""Representative requests, at midpoint quantiles of prompt (``latency_requests``), whose mean
latency is a pod's W(N)."""
PROJECTED_STATES = 4
"""The states the replayed arrivals find, at evenly spaced quantiles, that the level averages."""
MAX_ARRIVALS = 1024
"""Arrivals replayed at most; beyond, consecutive ones are merged (their weights summed)."""
# Requests in the system, beyond the present ones, at which W(N) is predicted (interpolated
# between, extrapolated past the last).
_GRID_EXTRA = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# The latency tables' shares of the requests above the present load before their first token:
# all and none, between which the replay interpolates by its own share (``project``).
_YOUNG_SHARES = (1.0, 0.0)
_MIN_LATENCY_S = 1e-3
_MAX_LATENCY_S = 1e6  # "never leaves" within any window, and finite arithmetic


def project(
    pods: Sequence[Candidate],
    requests: Sequence[Representative],
    arrivals: Arrivals,
    predict: RowPredictor,
    states: int = PROJECTED_STATES,
) -> list[tuple[list[Candidate], FloatArray]]:
    """The pods as the next interval's arrivals find them: ``states`` snapshots (each the pods
    and the requests in the system on each), or none without arrivals.

    The recent arrivals are replayed from now onto the pods as they stand, as a fluid per pod:
    each arrival adds its share of a request to every pod of its role (a balancing chain
    spreads them evenly). With N requests on a pod, a replayed one leaves the prefill stage at
    1 / TTFT(N - 1) and then decodes, leaving at 1 / (TPOT(N - 1) x the further output
    tokens); the present ones leave at 1 / W(N - 1), the sum (Little's law: each request
    shares the pod with N - 1 others). The times are the models' own mean predictions for the
    representative requests on the pod holding that many (a prefill pod only prefills; a
    decode pod receives its requests prefilled), scaled to what the pool measured with
    ``arrivals.served`` (``_calibrated``), interpolated between a table in which the
    requests above the present load are all before their first token and one in which none
    is, by the replay's own share of such requests. Each arrival finds, per pod,
    what those before it left: in a burst, the ones ahead of it, still before their first
    token. The snapshots are those findings at evenly spaced quantiles, per pod (``_found``):
    the present gauges, plus for the requests above them running, waiting and KV as the
    present ones (scaled down below them), plus the uncached prompts of the replayed ones
    still before their first token.

    With latency that grows with load, arrivals that come sooner or more densely never give a
    pod less load in any snapshot."""
    n0 = np.array([p.num_request_running + p.num_request_waiting for p in pods], np.float64)
    if not arrivals.times_s or not pods or not requests or states < 1:
        return []
    reps = latency_requests(requests)
    mean_prompt = float(np.mean([r.prompt_tokens for r in requests]))
    mean_uncached = float(
        np.mean([r.prompt_tokens * (1.0 - r.prefix_cache_score) for r in requests])
    )
    footprint = _footprints(pods, n0, mean_prompt, mean_uncached)
    # Two tables: every request above the present load still before its first token (holding
    # its uncached prompt in prefill), and none. The replay interpolates between them by its
    # own share of such requests: most of them decode between bursts, and the first table
    # alone read their decode slowed by prompts no longer in prefill; under an overload's
    # growing queue most of them wait for their first token, and the first table is the one.
    grid, prefill_s, decode_s = _latency_table(
        pods, n0, footprint, reps, arrivals.output_tokens, predict, _YOUNG_SHARES
    )
    if arrivals.served is not None and all(p.role == "" for p in pods):
        prefill_s, decode_s = _calibrated(
            grid, prefill_s, decode_s, arrivals.served, max(0.0, arrivals.output_tokens - 1.0)
        )

    n_prefill = sum(1 for p in pods if p.role == "prefill")
    share = np.array(
        [1.0 / (n_prefill if p.role == "prefill" else len(pods) - n_prefill) for p in pods]
    )
    # A decode pod of a P/D pool receives its requests prefilled: straight into decode.
    into_decode = np.array([p.role == "decode" for p in pods])
    to_prefill, to_decode = np.where(into_decode, 0.0, share), np.where(into_decode, share, 0.0)
    # In the window's order: a burst the pods are in the middle of is replayed at the end.
    # Replaying the newest first was tried and not kept (docs/capacity.md, "The replay
    # mirrored, newest traffic first"): less optimistic in Azure code's bursts, more
    # pessimistic past saturation elsewhere, and the burst's misses are mostly its TPOT.
    times, weights = _merged(arrivals, MAX_ARRIVALS)
    seen = np.empty((len(times), len(pods)))  # requests in the system each arrival finds
    seen_prefill = np.empty_like(seen)  # of which replayed ones still before their first token
    seen_present = np.empty_like(seen)  # and of the present ones, still there
    present, young, old = n0.copy(), np.zeros_like(n0), np.zeros_like(n0)
    # Both stages of both tables interpolated in one call.
    stages = np.concatenate([prefill_s, decode_s])
    last = 0.0
    for k, (t, w) in enumerate(zip(times, weights, strict=True)):
        gap = max(0.0, t - last)  # from now (the window's start) to the first arrival too
        if gap > 0.0:
            n = present + young + old
            # The grid's W(N) is the time of a request joining a pod that holds N; a request
            # already on a pod holding N shares it with N - 1 others. Read at N, a pod serving
            # its requests side by side drained at N / (N + 1) of its rate (half at N = 1, where
            # the pods mostly are), and the replay's states were about twice too full past
            # saturation (docs/capacity.md, "The replay's drain").
            ahead = np.maximum(n - 1.0, 0.0)
            tp_all, tp_none, td_all, td_none = _interpolate(grid, stages, ahead)
            f = _young_share(n, n0, young)
            tp = f * tp_all + (1.0 - f) * tp_none
            td = f * td_all + (1.0 - f) * td_none
            present = present * np.exp(-gap / (tp + td))
            young, old = _drain(young, old, tp, td, gap)
        seen[k] = present + young + old
        seen_prefill[k] = young
        seen_present[k] = present
        young = young + w * to_prefill
        old = old + w * to_decode
        last = t
    out = []
    counts = np.repeat(np.asarray(weights, np.float64)[:, None], len(pods), axis=1)
    qs = (np.arange(states) + 0.5) / states
    # Weighted: an arrival standing for several requests found the same pods for each.
    founds, aheads, lefts = (
        np.quantile(x, qs, axis=0, weights=counts, method="inverted_cdf")
        for x in (seen, seen_prefill, seen_present)
    )
    for found, ahead, left in zip(founds, aheads, lefts, strict=True):
        out.append(
            (
                [
                    _found(p, n0[j], found[j], ahead[j], footprint[j], left[j])
                    for j, p in enumerate(pods)
                ],
                found,
            )
        )
    return out


def latency_requests(
    requests: Sequence[Representative], most: int = LATENCY_REQUESTS
) -> list[Representative]:
    """At most ``most`` of ``requests``, at the midpoint quantiles of their prompts (positions
    (k + 0.5) / most of the sorted list): their mean latency stands for the requests'. Points
    that include both ends (a first version's, evenly spaced from the shortest to the longest)
    weigh each end as a whole step of the distribution where it stands for half of one; on
    Mooncake's long-tailed prompts the longest one's TTFT lifted the replay's prefill stage,
    and the replay read 15-18 points pessimistic at 1.2x saturation, 8.6-9.1 with midpoints
    (docs/capacity.md, "The replay's representatives at midpoint quantiles")."""
    ordered = sorted(requests, key=lambda r: (r.prompt_tokens, r.prefix_cache_score))
    m = min(most, len(ordered))
    return [ordered[int((k + 0.5) * len(ordered) / m)] for k in range(m)]


def _young_share(n: FloatArray, n0: FloatArray, young: FloatArray) -> FloatArray:
    """Per pod, the share of the requests above the present load that are replayed ones still
    before their first token (1 where none is above it: the grid's own convention)."""
    extra = n - n0
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(extra > 1e-9, young / extra, 1.0)
    out: FloatArray = np.clip(share, 0.0, 1.0)
    return out


def _drain(
    young: FloatArray, old: FloatArray, tp: FloatArray, td: FloatArray, gap: float
) -> tuple[FloatArray, FloatArray]:
    """Over ``gap`` seconds: requests before their first token leave that stage at 1 / ``tp``
    and start decoding, decoding ones leave at 1 / ``td`` (both rates held over the gap, where
    the two-stage chain has an exact solution)."""
    a, b = np.exp(-gap / tp), np.exp(-gap / td)
    with np.errstate(invalid="ignore", divide="ignore"):
        moved = np.where(
            np.abs(td - tp) > 1e-9 * np.maximum(td, tp),
            young * td / (td - tp) * (b - a),
            young * gap / tp * a,  # equal rates: the limit of the above
        )
    return young * a, old * b + np.maximum(moved, 0.0)


def _latency_table(
    pods: Sequence[Candidate],
    n0: FloatArray,
    footprint: list[_Footprint],
    reps: Sequence[Representative],
    output_tokens: float,
    predict: RowPredictor,
    shares: Sequence[float],
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per pod, at a grid of N (one prediction call for all pods and ``shares``; per share a
    table whose rows are pods, columns grid points): the seconds a request spends before its
    first token (the mean predicted TTFT) and decoding (TPOT x the further output tokens). On a
    prefill pod a request leaves at its first token; on a decode pod it arrives prefilled. Made
    non-decreasing in N: a fuller pod never serves a request faster than an emptier one,
    whatever a fitted model says between its training points. A latency the models cannot give
    (NaN, inf) holds its requests. Each of ``shares`` is a share of the requests above the
    present load still before their first token, holding their uncached prompt in prefill."""
    grid = np.concatenate(
        [
            np.stack([np.zeros_like(n0), n0 / 2.0, n0], axis=1),
            n0[:, None] + np.asarray(_GRID_EXTRA),
        ],
        axis=1,
    )
    # Each pod's state per grid point once (not once per representative): the rows are most
    # of a tick's cost on a large pool.
    held = [
        _holding(pod, n0[j], float(n), footprint[j], f)
        for f in shares
        for j, pod in enumerate(pods)
        for n in grid[j]
    ]
    rows = _placed(held, reps, by_pod=True)
    ttft_flat, tpot_flat = predict(rows)
    shape = (len(shares), len(pods), grid.shape[1], len(reps))
    ttft = np.asarray(ttft_flat, np.float64).reshape(shape)
    tpot = np.asarray(tpot_flat, np.float64).reshape(shape)
    further = max(0.0, output_tokens - 1.0)
    roles = np.array([p.role for p in pods])[None, :, None, None]
    before = np.where(roles == "decode", 0.0, ttft)
    decoding = np.where(
        roles == "prefill",
        0.0,
        np.where(roles == "decode", tpot * max(further, 1.0), tpot * further),
    )

    def seconds(ms: FloatArray) -> FloatArray:
        ms = np.where(np.isfinite(ms), ms, _MAX_LATENCY_S * 1000.0)
        s = np.clip(ms.mean(axis=3) / 1000.0, _MIN_LATENCY_S, _MAX_LATENCY_S)
        return np.maximum.accumulate(s, axis=2)

    return grid, seconds(before), seconds(decoding)


# Bands of the requests a pod held (lower edges) over which measured and tabled latency are
# compared: one count each where most requests are, wider where few are.
_SERVED_BANDS = (0.0, 1.0, 2.0, 3.0, 5.0, 8.0, 12.0)
_SERVED_MIN = 20  # requests a band needs before its own ratio is used
_SERVED_RATIO = (0.25, 4.0)  # the ratios a band may scale the tables by


def _calibrated(
    grid: FloatArray,
    prefill_s: FloatArray,
    decode_s: FloatArray,
    served: Served,
    further: float,
) -> tuple[FloatArray, FloatArray]:
    """The latency tables scaled, band by band of the requests held, to what the pool's recent
    requests measured. The tables are the models' mean predictions for the representative
    requests on each pod, a mean over the pods at states made up of the present gauges; the
    chain sends each request to the pod predicted best for it, and the states behind a
    sample are real. By the count an arrival found, the tables read the time to the first
    token at 1.26-1.65x the measured on Azure code and up to 2x on Mooncake, and decoding at
    0.7-0.95x (docs/capacity.md, "The replay's latency calibrated to the pool's own"). Per
    band: the ratio of the measured sum to the tables' (the mean over the pods and both
    tables at each sample's count); a band with too few samples takes its nearest lower
    band's ratio (its nearest higher one's, else none). Decoding compares seconds per output
    token (``further`` tokens a decode), each TPOT sample weighing the same: that overshoots
    where short answers have the slowest tokens (Azure code's decode at 1.2-1.7x the measured
    at 0-2 requests), but weighted by tokens the replay read optimistic at the tuning slice's
    1.2x, and was not kept (docs/capacity.md, on this calibration)."""
    prefill_s = prefill_s * _served_ratio(grid, prefill_s, served.ttft)[None]
    if further > 0.0:
        decode_s = decode_s * _served_ratio(grid, decode_s / further, served.tpot)[None]
    # Scaled band by band, a table may dip at a band's edge: held non-decreasing again.
    return np.maximum.accumulate(prefill_s, axis=2), np.maximum.accumulate(decode_s, axis=2)


def _served_ratio(
    grid: FloatArray, table: FloatArray, samples: Sequence[tuple[float, float]]
) -> FloatArray:
    """Per pod and grid point, measured over tabled latency in the grid point's band (1 with
    no band sampled enough)."""
    edges = np.asarray(_SERVED_BANDS)
    bands = np.ones(len(edges))
    if samples:
        held = np.maximum(np.array([c for c, _ in samples], np.float64), 0.0)
        measured = np.array([s for _, s in samples], np.float64)
        unique, index = np.unique(held, return_inverse=True)
        pods = grid.shape[0]
        # The tables' reading at each distinct count: the mean over the pods and the tables.
        tabled = np.array(
            [float(np.mean(_interpolate(grid, table, np.full(pods, u)))) for u in unique]
        )[index]
        band = np.searchsorted(edges, held, side="right") - 1
        seen = np.zeros(len(edges), np.bool_)
        for b in range(len(edges)):
            inside = (band == b) & np.isfinite(measured) & np.isfinite(tabled)
            if inside.sum() >= _SERVED_MIN and tabled[inside].sum() > 0.0:
                bands[b] = measured[inside].sum() / tabled[inside].sum()
                seen[b] = True
        if seen.any():
            sampled = np.flatnonzero(seen)
            for missing in np.flatnonzero(~seen).tolist():
                lower = sampled[sampled < missing]
                bands[missing] = bands[int(lower[-1]) if len(lower) else int(sampled[0])]
        bands = np.clip(bands, *_SERVED_RATIO)
    out: FloatArray = bands[np.searchsorted(edges, grid, side="right") - 1]
    return out


def _interpolate(grid: FloatArray, latency: FloatArray, n: FloatArray) -> FloatArray:
    """Latency at ``n`` per pod: linear between grid points, extended along the last segment.
    ``latency`` is pods x grid points, or several such tables stacked (one result each)."""
    cols = grid.shape[1]
    # The segment [k, k + 1] holding n (the last one past the grid's end).
    k = np.clip((grid <= n[:, None]).sum(axis=1) - 1, 0, cols - 2)
    rows = np.arange(len(n))
    x0, x1 = grid[rows, k], grid[rows, k + 1]
    y0, y1 = latency[..., rows, k], latency[..., rows, k + 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = np.where(x1 > x0, (y1 - y0) / (x1 - x0), 0.0)
    out: FloatArray = np.clip(y0 + slope * (n - x0), y0, _MAX_LATENCY_S)
    return out


def _merged(arrivals: Arrivals, most: int) -> tuple[list[float], list[float]]:
    """At most ``most`` arrivals: runs of consecutive ones merged into their first, their
    weights summed (a burst stays a burst; the replay's cost stays bounded)."""
    times = list(arrivals.times_s)
    weights = list(arrivals.weights) if arrivals.weights is not None else [1.0] * len(times)
    if len(times) <= most:
        return times, weights
    run = -(-len(times) // most)  # ceil
    return (
        [times[i] for i in range(0, len(times), run)],
        [sum(weights[i : i + run]) for i in range(0, len(times), run)],
    )


_Footprint = tuple[float, float, float, float, float]
"""Per request in the system: (running, waiting, KV fraction, prefill tokens, decode tokens)."""


def _footprints(
    pods: Sequence[Candidate], n0: FloatArray, mean_prompt: float, mean_uncached: float
) -> list[_Footprint]:
    """What each request the replay adds above a pod's present load carries. Those are young
    requests (the ones ahead of an arrival in its burst, or an overload's growing queue), so
    each holds its uncached prompt in prefill (on a decode pod of a P/D pool, its prompt in
    decode); running or waiting and KV as the role group's present requests are, one running
    request with no KV on an idle group."""
    by_role: dict[str, _Footprint] = {}
    for role in {p.role for p in pods}:
        group = [j for j, p in enumerate(pods) if p.role == role]
        total = float(n0[group].sum())
        prefill, decode = (0.0, mean_prompt) if role == "decode" else (mean_uncached, 0.0)
        if total >= 1.0:
            running = sum(pods[j].num_request_running for j in group) / total
            waiting = sum(pods[j].num_request_waiting for j in group) / total
            kv = sum(pods[j].kv_cache_percentage for j in group) / total
            by_role[role] = (running, waiting, kv, prefill, decode)
        else:
            by_role[role] = (1.0, 0.0, 0.0, prefill, decode)
    return [by_role[p.role] for p in pods]


def _holding(pod: Candidate, n0: float, n: float, per: _Footprint, young: float) -> Candidate:
    """``pod`` holding ``n`` requests in the system rather than its present ``n0``, the share
    ``young`` of the ones above it before their first token (``_footprints``): where the
    latency grid is predicted. Below ``n0`` the present requests left are ``n`` of them, so
    their prefill tokens in flight scale down with the rest of the gauges (an empty pod with
    its present prefill work would be no state the pods are ever in, and the grid's
    non-decreasing envelope would carry its latency up)."""
    return _found(pod, n0, n, young * max(0.0, n - n0), per, min(n, n0))


def _found(
    pod: Candidate,
    n0: float,
    n: float,
    prefilling: float,
    per: _Footprint,
    present: float | None = None,
) -> Candidate:
    """``pod`` as an arrival finds it: ``n`` requests in the system, of which ``prefilling``
    replayed ones still hold their uncached prompt in prefill and ``present`` (default: all
    ``n0``) present ones are still there. Above ``n0``, the present requests keep their gauges
    and the ones above them run, wait and hold KV as they do; below it, the present gauges
    scale down with ``n``. The present prefill tokens in flight scale with the present
    requests left (they are the present requests' prompts, not the replay's), and the
    prefilling ones add theirs. Every gauge rises with ``n``, ``prefilling`` and ``present``."""
    left = 1.0 if present is None or n0 <= 0.0 else min(1.0, present / n0)
    prefill = round(pod.prefill_tokens_in_flight * left + prefilling * per[3])
    if left <= 0.0:
        pod = without_progress(pod)  # none of the present requests is left
    if n < n0:
        return dataclasses.replace(scaled(pod, n / n0), prefill_tokens_in_flight=prefill)
    extra = n - n0
    return dataclasses.replace(
        pod,
        num_request_running=pod.num_request_running + round(extra * per[0]),
        num_request_waiting=pod.num_request_waiting + round(extra * per[1]),
        kv_cache_percentage=min(1.0, pod.kv_cache_percentage + extra * per[2]),
        prefill_tokens_in_flight=prefill,
        decode_tokens_in_flight=pod.decode_tokens_in_flight + round(extra * per[4]),
    )


def saturation_replicas(
    level_at: Callable[[float], float | None], pods: int, current: int, budget: float
) -> int | None:
    """Headroom's predicted-SLO saturation as a pod count: keep the share of representative
    requests that would miss *because of load* within ``budget`` (1 - the attainment target).

    ``level_at(factor)`` is the level over the ``pods`` ready pods with their load scaled by
    ``factor`` (``scaled``): 1 as they stand, 0 idle (what would miss on any pod: on Mooncake
    the longest prompts cannot prefill within 2 s even alone, and no pod count fixes that),
    ``pods / (pods - 1)`` the same work over one pod fewer. Over the budget, add the share of
    pods missing (at least 1) to ``current``; within it on one pod fewer, one fewer; otherwise
    ``current``. None without a level (no model or no traffic yet).

    One definition for the simulated scaler (``backend.sim.autoscale.PredictedSaturation``)
    and the service's gauge (``headroom_saturation_replicas``)."""
    level, idle = level_at(1.0), level_at(0.0)
    if level is None or idle is None:
        return None
    if level - idle > budget:
        return current + max(1, math.ceil(pods * (level - idle)))
    if pods > 1:
        fewer = level_at(pods / (pods - 1))
        if fewer is not None and fewer - idle <= budget:
            return current - 1
    return current


P_D_ROLES: Final = ("prefill", "decode")


def role_replicas(
    level_at: Callable[[float, str], float | None], roles: Sequence[str], budget: float
) -> dict[str, int] | None:
    """A P/D pool's saturation count per role: ``saturation_replicas`` for each role with only
    that role's pods scaled (``level_at(factor, role)``: the level with the role's pods' load
    times ``factor``, the other role's as it stands). Idle prefill pods leave the misses the
    decode side causes, and the other way round, so each role is asked for the misses its own
    load causes. None unless ``roles`` (the fresh pods') hold both roles, or without a level."""
    if not set(P_D_ROLES) <= set(roles):
        return None
    out: dict[str, int] = {}
    for role in P_D_ROLES:
        n = sum(r == role for r in roles)
        count = saturation_replicas(functools.partial(_role_level, level_at, role), n, n, budget)
        if count is None:
            return None
        out[role] = count
    return out


def _role_level(
    level_at: Callable[[float, str], float | None], role: str, factor: float
) -> float | None:
    return level_at(factor, role)


def scaled(pod: Candidate, share: float) -> Candidate:
    """``pod`` with its load gauges times ``share``: part of its work left (below 1), or the
    same work spread over fewer pods (above 1). Scaled to no load it carries no progress
    (``without_progress``)."""
    out = dataclasses.replace(
        pod,
        num_request_running=round(pod.num_request_running * share),
        num_request_waiting=round(pod.num_request_waiting * share),
        kv_cache_percentage=min(1.0, pod.kv_cache_percentage * share),
        prefill_tokens_in_flight=round(pod.prefill_tokens_in_flight * share),
        decode_tokens_in_flight=round(pod.decode_tokens_in_flight * share),
    )
    return out if share > 0.0 else without_progress(out)


def without_progress(pod: Candidate) -> Candidate:
    """``pod`` with none of its present requests' progress: 0, as the wire sends for a pod with
    nothing in flight. A long prefill wait kept on an emptied pod is a state no pod shows, which
    the TTFT trees read as a jammed pod (the simulated scaler's idle counterfactual kept it and
    never scaled down)."""
    return dataclasses.replace(
        pod, ms_since_last_token=0.0, oldest_prefill_wait_ms=0.0, ms_since_last_first_token=0.0
    )


_FIELDS = tuple(f.name for f in dataclasses.fields(Candidate))
_PROMPT, _PREFIX, _GENERATED = (
    _FIELDS.index(name)
    for name in ("input_token_length", "prefix_cache_score", "num_tokens_generated")
)


def _placed(
    pods: Sequence[Candidate], requests: Sequence[Representative], *, by_pod: bool
) -> list[Candidate]:
    """Every request on every pod, at its first token: the pod's gauges with the request's
    prompt and prefix score. Pod-major (each pod's requests together) or request-major. Built
    from each pod's field values once: ``dataclasses.replace`` per row was a large part of a
    100-pod tick's cost (tens of thousands of rows)."""
    values = [[getattr(pod, name) for name in _FIELDS] for pod in pods]
    reqs = [(r.prompt_tokens, r.prefix_cache_score) for r in requests]

    def row(v: list[Any], prompt: int, prefix: float) -> Candidate:
        v[_PROMPT], v[_PREFIX], v[_GENERATED] = prompt, prefix, 1
        return Candidate(*v)

    if by_pod:
        return [row(v, prompt, prefix) for v in values for prompt, prefix in reqs]
    return [row(v, prompt, prefix) for prompt, prefix in reqs for v in values]


def _meets(
    ttft: FloatArray, tpot: FloatArray, ttft_slo: float | None, tpot_slo: float | None
) -> BoolArray:
    ok = np.isfinite(ttft) & np.isfinite(tpot)
    # At or under the SLO, as the chain's tier counts a pod positive (headroom >= 0, upstream's
    # slo-headroom-tier-filter). Strictly under (upstream's IsValid) counted a pod the chain
    # picks at exactly its SLO as a miss, and filling that pod then lowered the pool's level:
    # under `least` the chain packs the request onto the pod with the least headroom, 0.
    if ttft_slo is not None:
        ok &= ttft <= ttft_slo
    if tpot_slo is not None:
        ok &= tpot <= tpot_slo
    return ok


def saturation(
    pods: Sequence[Candidate],
    requests: Sequence[Representative],
    policy: SchedulingPolicy,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    predict: RowPredictor,
    meet_probability: MeetProbability | None = None,
    arrivals: Arrivals | None = None,
    present_weight: float = 0.0,
    output_tokens: float | None = None,
) -> Saturation:
    """The pool's and each pod's saturation level. ``pods`` carry their current gauges; their
    ``input_token_length`` and ``prefix_cache_score`` are replaced by each request's. With
    ``meet_probability`` a request misses with its probability of missing; without, by the 0/1
    rule on the mean. The chain still routes on the means, as it does live.

    With ``arrivals`` the level is that of the next interval: the mean of the levels on the
    states the recent arrivals, replayed from now, find (``project``); the pods' predictions
    and the headroom are those of the middle state. With ``present_weight`` above 0 as well,
    the levels (the pool's and each pod's) are that weight's mix of the present ones and the
    next interval's, and the rest is the present state's ("if routed now"). Without
    arrivals, with none in the window, or with a weight of 1, the pods are taken as they
    stand. Both parts are in the result (``present_level``, ``next_level``).

    ``output_tokens``: the pool's recent mean answer length, for how long a P/D decode pod's
    queue holds a first token (``decode_wait_ms``); None (no sample said one): the policy's
    ``expected_output_tokens``, as the service reads it."""
    if not pods or not requests:
        raise ValueError("saturation needs at least one pod and one representative request")
    if not 0.0 <= present_weight <= 1.0:
        raise ValueError("present_weight is in [0, 1]")
    # Nothing to replay with all the weight on the present level.
    states = (
        project(pods, requests, arrivals, predict)
        if arrivals is not None and present_weight < 1.0
        else []
    )
    now = np.array([p.num_request_running + p.num_request_waiting for p in pods], float)
    # How long a request decodes, for a P/D decode pod's queue (``decode_wait_ms``): the pool's
    # recent mean where known, else the policy's expectation (the joint P/D pick's). The
    # policy's 256 tokens, ten times Azure code's answers, asked for decode pods its queues
    # never needed (docs/capacity.md, "The decode pods' queue in the level").
    output = float(policy.expected_output_tokens) if output_tokens is None else output_tokens
    at = functools.partial(
        _at,
        requests=requests,
        policy=policy,
        ttft_slo_ms=ttft_slo_ms,
        tpot_slo_ms=tpot_slo_ms,
        predict=predict,
        meet_probability=meet_probability,
        output_tokens=output,
    )

    def present() -> Saturation:
        return at(pods, now)

    if not states:
        base = present()
        return dataclasses.replace(base, present_level=base.level)
    each = [at(state, held) for state, held in states]
    rate = arrivals.rate_rps if arrivals is not None else 0.0
    now_sat = present()  # both parts are reported, whatever the weight
    w = present_weight
    next_level = float(np.mean([s.level for s in each]))
    level = w * now_sat.level + (1.0 - w) * next_level
    pod_levels = [
        w * p.level + (1.0 - w) * float(np.mean([s.pods[j].level for s in each]))
        for j, p in enumerate(now_sat.pods)
    ]
    base = each[len(each) // 2] if w <= 0.0 else now_sat
    ttft_share, tpot_share = (
        w * getattr(now_sat, name) + (1.0 - w) * float(np.mean([getattr(s, name) for s in each]))
        for name in ("meeting_ttft", "meeting_tpot")
    )
    return dataclasses.replace(
        base,
        level=level,
        meeting_slo=1.0 - level,
        meeting_ttft=ttft_share,
        meeting_tpot=tpot_share,
        pods=tuple(
            dataclasses.replace(p, level=x) for p, x in zip(base.pods, pod_levels, strict=True)
        ),
        arrival_rate_rps=rate,
        present_level=now_sat.level,
        next_level=next_level,
    )


def _at(
    pods: Sequence[Candidate],
    held: FloatArray,
    requests: Sequence[Representative],
    policy: SchedulingPolicy,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    predict: RowPredictor,
    meet_probability: MeetProbability | None,
    output_tokens: float,
) -> Saturation:
    """The levels with the pods in one state (``held``: the requests in the system on each)."""
    # Sorted by prompt length so that the median and p90 requests are found by position.
    reqs = sorted(requests, key=lambda r: (r.prompt_tokens, r.prefix_cache_score))
    n_req, n_pod = len(reqs), len(pods)
    rows = _placed(pods, reqs, by_pod=False)
    ttft_flat, tpot_flat = predict(rows)
    routed_ttft = np.asarray(ttft_flat, dtype=np.float64).reshape(n_req, n_pod)
    tpot = np.asarray(tpot_flat, dtype=np.float64).reshape(n_req, n_pod)
    # A decode pod's queue delays the first token of whatever it is handed; the chain routes
    # on the models' predictions as it does live (``routed_ttft``), the level reads the wait.
    wait = decode_wait_ms(pods, tpot, output_tokens)
    ttft = routed_ttft + wait
    ttft_flat = ttft.ravel()
    meets = _meets(ttft, tpot, ttft_slo_ms, tpot_slo_ms).astype(np.float64)
    # Each target alone, for the record: with both SLOs set, the joint share cannot be read
    # from the samples (a sample measures one target of an unnamed request).
    alone = [
        _meets(ttft, tpot, ttft_slo_ms, None).astype(np.float64),
        _meets(ttft, tpot, None, tpot_slo_ms).astype(np.float64),
    ]
    if meet_probability is not None:
        chance = meet_probability(rows, ttft_flat, tpot_flat, ttft_slo_ms, tpot_slo_ms)
        meets = np.asarray(chance, dtype=np.float64).reshape(n_req, n_pod)
        if ttft_slo_ms is not None and tpot_slo_ms is not None:
            alone = [
                np.asarray(meet_probability(rows, ttft_flat, tpot_flat, *slos), np.float64).reshape(
                    n_req, n_pod
                )
                for slos in ((ttft_slo_ms, None), (None, tpot_slo_ms))
            ]
        else:  # one SLO: the joint share is that target's, the other's is 1
            alone = [meets if ttft_slo_ms is not None else np.ones_like(meets)]
            alone.append(meets if tpot_slo_ms is not None else np.ones_like(meets))

    mid, high = _position(n_req, 0.5), _position(n_req, 0.9)
    pod_levels = tuple(
        PodLevel(
            name=pod.name,
            level=float(1.0 - meets[:, j].mean()),
            ttft_ms_p50=float(ttft[mid, j]),
            tpot_ms_p50=float(tpot[mid, j]),
            requests=float(held[j]),
        )
        for j, pod in enumerate(pods)
    )

    routed = dataclasses.replace(policy, epsilon_explore_neg=0.0)
    picked_ok = np.zeros(n_req, dtype=np.float64)
    picked_alone = np.zeros((2, n_req), dtype=np.float64)
    headroom: dict[int, Headroom] = {}
    # P/D pairs handed to a decode pod with a queue: (request, prefill pod, decode pod).
    queued: list[tuple[int, int, int]] = []
    for i, r in enumerate(reqs):
        candidates = rows[i * n_pod : (i + 1) * n_pod]
        row_ttft, row_tpot = routed_ttft[i], tpot[i]
        request = SchedulingRequest(
            prompt_tokens=r.prompt_tokens,
            ttft_slo_ms=ttft_slo_ms,
            tpot_slo_ms=tpot_slo_ms,
            seed=i,  # reproducible: the same state gives the same level
        )
        decision = schedule(request, candidates, routed, _fixed(row_ttft, row_tpot), traces=False)
        chosen = _trace(decision.candidates, decision.chosen)
        # Under P/D the first token comes from the prefill pod the chain paired with the
        # decode pod it chose: the TTFT is read there, the TPOT on the decode pod. (Read on the
        # decode pod alone, the level never saw the prefill pods' queues.)
        first = _trace(decision.candidates, decision.prefill) or chosen
        pair_wait = 0.0
        if chosen is not None and first is not None and decision.admitted:
            j = next(k for k, pod in enumerate(pods) if pod.name == chosen.name)
            f = next(k for k, pod in enumerate(pods) if pod.name == first.name)
            if f == j:
                picked_ok[i] = meets[i, j]
            else:  # the two chances apart, as independent
                pair_wait = float(wait[i, j])
                if pair_wait > 0.0:
                    queued.append((i, f, j))  # its chance is read after the loop, in one batch
                else:
                    picked_ok[i] = alone[0][i, f] * alone[1][i, j]
            picked_alone[:, i] = alone[0][i, f], alone[1][i, j]
        if i in (mid, high):
            ttft_headroom = first.ttft_headroom_ms if first else None
            headroom[i] = Headroom(
                r.prompt_tokens,
                chosen.name if chosen else None,
                None if ttft_headroom is None else ttft_headroom - pair_wait,
                chosen.tpot_headroom_ms if chosen else None,
            )
    if queued:
        # Their first token: the prefill pod's TTFT plus the decode pod's queue, as one TTFT
        # (its chance read at the prefill pod's load), times the decode pod's TPOT chance.
        idx, f_idx, d_idx = (np.array(x) for x in zip(*queued, strict=True))
        first_ms = routed_ttft[idx, f_idx] + wait[idx, d_idx]
        if meet_probability is not None and ttft_slo_ms is not None:
            chance = np.asarray(
                meet_probability(
                    [rows[i * n_pod + f] for i, f, _ in queued],
                    first_ms,
                    tpot[idx, f_idx],
                    ttft_slo_ms,
                    None,
                ),
                dtype=np.float64,
            )
        else:
            chance = _meets(first_ms, tpot[idx, f_idx], ttft_slo_ms, None).astype(np.float64)
        picked_ok[idx] = chance * alone[1][idx, d_idx]
        picked_alone[0, idx] = chance
    level = float(1.0 - picked_ok.mean())
    ttft_share, tpot_share = (float(x) for x in picked_alone.mean(axis=1))
    return Saturation(
        level,
        1.0 - level,
        pod_levels,
        headroom[mid],
        headroom[high],
        n_req,
        meeting_ttft=ttft_share,
        meeting_tpot=tpot_share,
    )


def decode_wait_ms(pods: Sequence[Candidate], tpot: FloatArray, output_tokens: float) -> FloatArray:
    """Per (request, pod): how long a request handed to the pod waits for a place in its batch,
    if the pod is a P/D decode pod with requests already waiting (0 otherwise). It is admitted
    after those ahead of it and itself, one as each running request finishes, and the running
    ones finish at ``running / (output_tokens x TPOT)`` a millisecond: a fluid estimate from the
    pod's gauges and the TPOT predicted there. The models cannot see it: a P/D pool's TTFT
    samples time the prefill pod, whose queue is not this one, so a decode pod full of KV held
    every first token for minutes while the level read 85 % meeting (docs/capacity.md, "The
    decode pods' queue in the level")."""
    waiting = np.array(
        [p.num_request_waiting if p.role == "decode" else 0 for p in pods], dtype=np.float64
    )
    running = np.array([max(p.num_request_running, 1) for p in pods], dtype=np.float64)
    ahead = np.where(waiting > 0.0, waiting + 1.0, 0.0)
    wait: FloatArray = np.asarray(tpot, dtype=np.float64) * output_tokens * (ahead / running)
    return wait


def _fixed(ttft: FloatArray, tpot: FloatArray) -> Predictor:
    """The predictions already made for this request's row of pods, handed to the chain."""

    def predictor(_: Sequence[Candidate], __: SchedulingRequest) -> tuple[FloatArray, FloatArray]:
        return ttft, tpot

    return predictor


def _position(n: int, q: float) -> int:
    return min(n - 1, int(np.floor(q * (n - 1) + 0.5)))


def _trace(traces: Sequence[CandidateTrace], name: str | None) -> CandidateTrace | None:
    return next((t for t in traces if t.name == name), None) if name else None
