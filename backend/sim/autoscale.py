"""An autoscaling loop around the simulator: pods start after a model load and leave after draining.

``Fleet`` is the pool's pod lifecycle (pure bookkeeping): a pod asked for is *starting* for
``startup_s`` (image pull and model load; it costs GPU time and takes no traffic), then *ready*
(routable); a pod removed is *draining*: no new requests, it finishes what it holds, then it is
off. The count the autoscaler controls is ready + starting (a Deployment's replicas), bounded
by ``min_pods`` and ``max_pods``.

``run_autoscaled`` drives a ``Simulation`` in control periods (HPA's 15 s sync period by
default): at each one the scaler reads what it would read in a cluster and returns a desired
count; the same HPA behaviour then applies to every scaler (scale-down stabilisation: the
highest desired count of the last 300 s, as ``behavior.scaleDown.stabilizationWindowSeconds``
defaults to), so the comparison is of the signals, not of the actuation.

The scalers:

* ``QueueHpa``: llm-d's "HPA + EPP metrics" path: an HPA on the EPP's queue depth
  (``inference_extension_flow_control_queue_size``, the requests waiting for a backend). The
  simulated router dispatches at once, so requests wait in the pods' queues instead: the metric
  is the sum of the ready pods' ``num_request_waiting``, with an AverageValue target per pod and
  the HPA algorithm: ``desired = ceil(current x metric / target)``, no change within the 10 %
  tolerance.
* ``WvaSaturation``: the workload-variant-autoscaler's saturation analyzer with its default
  thresholds (KV 0.80, queue 5; scale up when the non-saturated replicas' average spare KV is
  under 0.10 or spare queue under 3; scale down only if the load spread over one replica fewer
  keeps both spares; no scale-up while a replica is pending), on the peak of each gauge over the
  last minute (its ``max_over_time[1m]`` queries).
* ``PredictedSaturation``: Headroom's saturation level (``backend.scheduling.saturation``, the
  code the service runs) over the ready pods' gauges and a profile of recent requests, with the
  router's own online-trained models: scale up when more than the SLO budget of representative
  requests would miss; scale down when the pods' load spread over one pod fewer would still keep
  the level within the budget (``saturation_replicas``, which the service's
  ``headroom_saturation_replicas`` gauge computes too).
* ``Combined``: the largest of several scalers' answers, as a KEDA ScaledObject with a trigger
  for each scales.
* ``DesiredReplicas``: the service's desired-replicas computation
  (``fromsamples.estimate_replicas``, which the periodic job runs too) on the samples the
  simulated EPP posted over the last minutes: rebuild the requests, calibrate the pod, bisect
  on the pod count over replays.
* ``Foresight``: not a scaler a cluster can run but a reference: it reads the trace's future
  and asks for pods in proportion to the prompt tokens arriving one start-up ahead. Swept over
  its one knob it shows what scaling with the coming load known exactly buys at each cost.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal, Protocol

import numpy as np
import numpy.typing as npt

from backend.scheduling.record import LevelRecord, Outcomes, corrected
from backend.scheduling.saturation import (
    Arrivals,
    Representative,
    Saturation,
    Served,
    saturation,
    saturation_replicas,
    scaled,
)
from backend.scheduling.types import Candidate, FloatArray
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.fromsamples import (
    PLATEAU_TOLERANCE,
    Calibration,
    Desired,
    ReplicaEstimate,
    SampleRow,
    estimate_replicas,
    rows_from_observations,
)
from backend.sim.online import FIELDS, columns
from backend.sim.pool import PodSpec
from backend.sim.replay import Recorder
from backend.sim.routers.predicted import PredictedLatency, candidate_row
from backend.sim.traces.loader import Trace
from backend.sim.view import Slo

PodState = Literal["off", "starting", "ready", "draining"]

ROLES: Final = ("prefill", "decode")
"""A P/D pool's roles, each a Deployment of its own: one fleet and one scaler each."""


@dataclass
class Fleet:
    """Which pods are on, and since when; GPU time counts from the request for a pod to the end
    of its draining. Pods are named by their index in the pool: slot ``i`` is pod
    ``indices[i]`` (by default pod ``i``); a P/D pool has one fleet per role, over its role's
    pods."""

    slots: int
    min_pods: int
    max_pods: int
    startup_s: float
    initial: int
    indices: tuple[int, ...] = ()
    state: list[PodState] = field(init=False)
    ready_at: list[float] = field(init=False)
    on_since: list[float] = field(init=False)
    gpu_s: float = 0.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_pods <= self.max_pods:
            raise ValueError("need 1 <= min_pods <= max_pods")
        if not self.min_pods <= self.initial <= self.max_pods:
            raise ValueError("the initial pod count must be within [min_pods, max_pods]")
        if self.slots < self.max_pods:
            raise ValueError("need at least max_pods slots")
        if self.startup_s < 0:
            raise ValueError("startup_s must be >= 0")
        if not self.indices:
            self.indices = tuple(range(self.slots))
        if len(self.indices) != self.slots or len(set(self.indices)) != self.slots:
            raise ValueError("one distinct pod index per slot")
        ready: list[PodState] = ["ready"] * self.initial
        off: list[PodState] = ["off"] * (self.slots - self.initial)
        self.state = ready + off
        self.ready_at = [0.0] * self.slots
        self.on_since = [0.0] * self.slots

    def pods(self, state: PodState) -> list[int]:
        return [self.indices[i] for i, s in enumerate(self.state) if s == state]

    @property
    def replicas(self) -> int:
        """What the autoscaler controls: ready + starting."""
        return sum(1 for s in self.state if s in ("ready", "starting"))

    def ready_times(self) -> list[float]:
        """When each starting pod becomes ready."""
        return [self.ready_at[i] for i, s in enumerate(self.state) if s == "starting"]

    def _off(self, slot: int, now: float) -> None:
        self.gpu_s += now - self.on_since[slot]
        self.state[slot] = "off"

    def advance(self, now: float, busy: Callable[[int], bool]) -> None:
        """Starting pods whose load is done become ready; idle draining pods go off."""
        for slot, s in enumerate(self.state):
            if s == "starting" and self.ready_at[slot] <= now:
                self.state[slot] = "ready"
            elif s == "draining" and not busy(self.indices[slot]):
                self._off(slot, now)

    def scale_to(self, desired: int, now: float, load: Callable[[int], int]) -> int:
        """Start or remove pods towards ``desired`` (clamped to [min, max]); returns the count
        set. Removing cancels starting pods first (newest first, as a ReplicaSet deletes
        not-ready pods first), then drains the ready pods holding the least work."""
        target = min(max(desired, self.min_pods), self.max_pods)
        delta = target - self.replicas
        slots = range(self.slots)
        if delta > 0:
            free = [i for i in slots if self.state[i] == "off"]
            if len(free) < delta:
                raise RuntimeError("no free slot: raise slots (draining pods still hold theirs)")
            for slot in free[:delta]:
                self.state[slot] = "starting"
                self.ready_at[slot] = now + self.startup_s
                self.on_since[slot] = now
        elif delta < 0:
            starting = [i for i in slots if self.state[i] == "starting"]
            for slot in sorted(starting, key=lambda i: -self.on_since[i])[:-delta]:
                self._off(slot, now)
                delta += 1
            if delta < 0:
                ready = [i for i in slots if self.state[i] == "ready"]
                for slot in sorted(ready, key=lambda i: load(self.indices[i]))[:-delta]:
                    self.state[slot] = "draining"
        return target

    def gpu_hours(self, now: float) -> float:
        live = sum(now - self.on_since[p] for p, s in enumerate(self.state) if s != "off")
        return (self.gpu_s + live) / 3600.0


@dataclass(frozen=True)
class PodGauges:
    kv: float
    waiting: int
    running: int


@dataclass(frozen=True)
class Observation:
    """What a scaler reads at a control period."""

    now: float
    replicas: int
    starting: int
    gauges: dict[int, PodGauges]
    """Ready pods' gauges, by pod."""
    level: Callable[[Sequence[int], float], float | None]
    """Headroom's saturation level over these pods with their load scaled by the factor (None
    before the router has a model or traffic)."""
    recent: Callable[[float], Trace]
    """The trace's arrivals of the last ``seconds``, from 0."""
    samples: Callable[[float], list[SampleRow]] = lambda seconds: []
    """The samples the EPP posted in the last ``seconds`` (TTFT at the first token, TPOT at
    completion), as the service's samples table would hold them."""


class Scaler(Protocol):
    name: str

    def desired(self, obs: Observation) -> int: ...


@dataclass
class Fixed:
    """No scaling: always ``pods`` (the reference a scaler is measured against)."""

    pods: int
    name: str = "fixed"

    def desired(self, obs: Observation) -> int:
        return self.pods


@dataclass
class QueueHpa:
    """HPA on the EPP queue depth (AverageValue target per pod)."""

    target: float = 5.0
    tolerance: float = 0.1
    name: str = "queue-hpa"

    def desired(self, obs: Observation) -> int:
        if not obs.gauges:
            return obs.replicas
        queue = float(sum(g.waiting for g in obs.gauges.values()))
        # The HPA divides the metric by the pods it has metrics for (the ready ones).
        ratio = queue / len(obs.gauges) / self.target
        if abs(ratio - 1.0) <= self.tolerance:
            return obs.replicas
        return math.ceil(len(obs.gauges) * ratio)


@dataclass
class WvaSaturation:
    """WVA's saturation analyzer with its default thresholds, on 1-minute peaks."""

    kv_threshold: float = 0.80
    queue_threshold: float = 5.0
    kv_spare: float = 0.10
    queue_spare: float = 3.0
    window_s: float = 60.0
    name: str = "wva-saturation"
    _history: deque[tuple[float, dict[int, PodGauges]]] = field(default_factory=deque)

    def desired(self, obs: Observation) -> int:
        self._history.append((obs.now, obs.gauges))
        while self._history and self._history[0][0] < obs.now - self.window_s:
            self._history.popleft()
        peak: dict[int, tuple[float, float]] = {}
        for pod in obs.gauges:
            seen = [g[pod] for _, g in self._history if pod in g]
            peak[pod] = (max(x.kv for x in seen), float(max(x.waiting for x in seen)))
        free = [
            (kv, q)
            for kv, q in peak.values()
            if kv < self.kv_threshold and q < self.queue_threshold
        ]
        if not free:
            return obs.replicas + (1 if obs.starting == 0 else 0)
        spare_kv = float(np.mean([self.kv_threshold - kv for kv, _ in free]))
        spare_q = float(np.mean([self.queue_threshold - q for _, q in free]))
        if spare_kv < self.kv_spare or spare_q < self.queue_spare:
            # Pending replicas block a further scale-up (WVA's guard against cascades).
            return obs.replicas + (1 if obs.starting == 0 else 0)
        remaining = len(free) - 1
        if remaining < 1 or obs.starting:
            return obs.replicas
        after_kv = self.kv_threshold - sum(kv for kv, _ in free) / remaining
        after_q = self.queue_threshold - sum(q for _, q in free) / remaining
        if after_kv >= self.kv_spare and after_q >= self.queue_spare:
            return obs.replicas - 1
        return obs.replicas


@dataclass
class PredictedSaturation:
    """Headroom's predicted-SLO saturation (``saturation_replicas``): keep the share of
    representative requests that would miss *because of load* within the budget (1 - the
    attainment target), adding the share missing and removing one pod when one fewer keeps it.

    ``hold_while_starting``: decide nothing while a pod starts (its effect is not visible yet).
    The service's gauge cannot: it knows only the pods that send samples, so its deployable
    form (``headroom-saturation-gauge``) asks from the ready pods at every period, and the
    HPA's scale-down stabilisation keeps the pods on their way."""

    budget: float = 0.05
    hold_while_starting: bool = True
    name: str = "headroom-saturation"

    def desired(self, obs: Observation) -> int:
        pods = sorted(obs.gauges)
        if not pods or (obs.starting and self.hold_while_starting):
            return obs.replicas
        current = obs.replicas if self.hold_while_starting else len(pods)
        want = saturation_replicas(
            lambda factor: obs.level(pods, factor), len(pods), current, self.budget
        )
        return obs.replicas if want is None else want


@dataclass
class Combined:
    """The larger of several scalers' answers: a KEDA ScaledObject with one trigger each (the
    HPA it creates scales to the largest recommendation)."""

    parts: tuple[Scaler, ...]
    name: str = "headroom-combined"

    def desired(self, obs: Observation) -> int:
        return max(part.desired(obs) for part in self.parts)


@dataclass
class Foresight:
    """A reference that knows the future: ``pods_per_ktok`` pods per thousand prompt tokens a
    second arriving over ``window_s`` from ``lead_s`` ahead (the pods' start-up, so that they
    are ready when the load comes), rounded up. ``arrival_s`` and ``prompt_tokens`` are the
    whole run's trace (sorted by arrival). Prompt tokens rather than requests: a pod's work is
    mostly its prefill, and a long-prompt minute needs more pods than a short-prompt one with
    as many requests. Not deployable; it places the others: what following the load with no
    lag and no forecast error buys, swept over ``pods_per_ktok`` (its one knob) for each cost.
    A reference, not a bound: a count that is not proportional to the tokens (a floor for
    the longest prompts, say) could do better at some cost."""

    arrival_s: FloatArray
    prompt_tokens: npt.NDArray[np.int64]
    pods_per_ktok: float
    lead_s: float = 90.0
    window_s: float = 60.0
    name: str = "foresight"

    def __post_init__(self) -> None:
        if not self.pods_per_ktok > 0 or not self.window_s > 0 or self.lead_s < 0:
            raise ValueError("need pods_per_ktok > 0, window_s > 0 and lead_s >= 0")
        if len(self.arrival_s) != len(self.prompt_tokens):
            raise ValueError("one prompt length per arrival")

    def desired(self, obs: Observation) -> int:
        start = obs.now + self.lead_s
        lo, hi = np.searchsorted(self.arrival_s, [start, start + self.window_s], side="left")
        ktok_per_s = float(self.prompt_tokens[lo:hi].sum()) / 1000.0 / self.window_s
        return max(1, math.ceil(self.pods_per_ktok * ktok_per_s))


TREND_S: Final = 300.0
"""How long a history the simulated desired-replicas scaler reads its look-ahead's line from:
the service's default lookback, which it reads the line from."""


@dataclass
class DesiredReplicas:
    """Headroom's desired replicas, by the service's own path: every ``every_s`` the samples
    the EPP posted over the last ``lookback_s`` (``Observation.samples``) go through
    ``fromsamples.estimate_replicas``, which rebuilds the requests from them, calibrates the
    simulated pod to them (kept for ``recalibrate_s``, as the service keeps a pool's) and
    bisects on the pod count over replays routed by ``router`` (the service's
    ``HEADROOM_CAPACITY__DESIRED_ROUTER`` default). Where no pod count reaches ``target``, the
    answer is the fewest pods within ``plateau`` of what ``max_pods`` attain.

    Between runs it holds its last answer; with too few samples it keeps the current count."""

    slo: Slo
    target: float = 0.95
    lookback_s: float = 120.0
    every_s: float = 30.0
    min_pods: int = 1
    max_pods: int = 8
    plateau: float = PLATEAU_TOLERANCE
    router: str = "llm-d-322"
    recalibrate_s: float = 600.0
    rate_window_s: float | None = None
    """Replay at the rate of the lookback's last this many seconds (``current_load``); None:
    at the lookback's mean rate."""
    lead_s: float | None = 90.0
    """Replay at the rate forecast this long after the newest sample (``forecast_load``: the
    pods' start-up; the service's default, ``HEADROOM_CAPACITY__DESIRED_LEAD_S``); None: at the
    lookback's mean rate. A ``rate_window_s`` replaces it, as in the service."""
    trend_s: float = TREND_S
    """With ``lead_s``, the forecast's line is read over this long a history (the service's
    default lookback), the replay's lookback staying ``lookback_s``."""
    score_last_s: float | None = None
    """Score each replay on its last this many seconds' requests; None: on all of them."""
    also_replay_s: float | None = None
    """Also replay only the lookback's newest this many seconds and answer the larger count
    (``estimate_replicas``' ``newest``; the service's ``HEADROOM_CAPACITY__DESIRED_SHORT_REPLAY_S``
    with its 300 s lookback); None: the one replay."""
    name: str = "headroom-desired"
    _last: tuple[float, Desired] | None = None
    _calibration: tuple[float, Calibration] | None = None
    runs: list[ReplicaEstimate] = field(default_factory=list)
    """Every estimate made, oldest first (for reports and tests)."""

    def estimate(self, obs: Observation) -> Desired | None:
        """The latest answer: a new run every ``every_s``, the last one in between; None
        before the first (too few samples)."""
        if self._last is not None and obs.now - self._last[0] < self.every_s:
            return self._last[1]
        kept = self._calibration
        if kept is not None and obs.now - kept[0] > self.recalibrate_s:
            kept = None
        lead = None if self.rate_window_s else self.lead_s
        est = estimate_replicas(
            obs.samples(self.lookback_s),
            self.slo,
            self.target,
            router=self.router,
            max_replicas=self.max_pods,
            min_replicas=self.min_pods,
            calibrated=kept[1] if kept is not None else None,
            plateau=self.plateau,
            rate_window_s=self.rate_window_s,
            lead_s=lead,
            trend_rows=obs.samples(max(self.trend_s, self.lookback_s)) if lead else None,
            score_last_s=self.score_last_s,
            newest=obs.samples(self.also_replay_s)
            if self.also_replay_s and self.also_replay_s < self.lookback_s
            else None,
        )
        if est is None:
            return None
        if est.calibrated:
            self._calibration = (obs.now, est.calibration)
        self.runs.append(est)
        self._last = (obs.now, est.desired)
        return est.desired

    def desired(self, obs: Observation) -> int:
        answer = self.estimate(obs)
        return obs.replicas if answer is None else answer.replicas

    def role(self, role: str) -> RoleDesired:
        """The scaler of one role's Deployment in a P/D pool: this estimate's count of that
        role (the service's ``headroom_desired_role_replicas``). Both roles share the runs."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}")
        return RoleDesired(self, role, self.name)


@dataclass
class RoleDesired:
    """One role's count from a P/D pool's desired replicas (``DesiredReplicas.role``). Where
    the estimate has no split (its samples name no prefill pod) the role's count stays."""

    parent: DesiredReplicas
    role: str
    name: str

    def desired(self, obs: Observation) -> int:
        answer = self.parent.estimate(obs)
        if answer is None or answer.prefill_replicas is None:
            return obs.replicas
        if self.role == "prefill":
            return answer.prefill_replicas
        return answer.replicas - answer.prefill_replicas


def meets_slo(result: SimResult, slo: Slo) -> npt.NDArray[np.bool_]:
    """Per request: finished within both SLOs (shed or unfinished ones miss; a one-token
    answer has no TPOT to miss)."""
    ttft = result.ttft_ms
    tpot = np.nan_to_num(result.tpot_ms, nan=0.0)
    return np.isfinite(ttft) & (ttft <= slo.ttft_ms) & (tpot <= slo.tpot_ms)


def slo_attainment(result: SimResult, slo: Slo) -> float:
    """Share of requests within both SLOs."""
    ok = meets_slo(result, slo)
    return float(ok.mean()) if ok.size else 1.0


# Traffic shapes


Rate = Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]


def warp(trace: Trace, rate: Rate, horizon_s: float) -> Trace:
    """The trace's requests, in order, arriving at ``rate(t)`` times the trace's own rate: a
    recorded arrival at ``s`` lands at the ``t`` where the integral of the rate reaches ``s``.
    Requests past ``horizon_s`` are dropped."""
    grid = np.linspace(0.0, horizon_s, int(horizon_s * 10) + 1)
    steps = (rate(grid[1:]) + rate(grid[:-1])) / 2 * np.diff(grid)
    mass = np.concatenate([[0.0], np.cumsum(steps)])
    out = trace.select(trace.arrival_s <= mass[-1])
    return replace(out, arrival_s=np.interp(out.arrival_s, mass, grid), tick_s=0.0)


def ramp(base: float, peak: float, up_s: float, start_s: float = 0.0) -> Rate:
    """``base`` x the trace's rate until ``start_s``, rising linearly to ``peak`` over ``up_s``
    and back down to ``base`` over ``up_s``."""

    def rate(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        x = t - start_s
        up = base + (peak - base) * np.clip(x / up_s, 0.0, 1.0)
        down = peak - (peak - base) * np.clip((x - up_s) / up_s, 0.0, 1.0)
        return np.where(x <= up_s, up, down)

    return rate


def step(base: float, burst: float, at_s: float, for_s: float) -> Rate:
    """``base`` x the trace's rate, ``burst`` x from ``at_s`` for ``for_s``."""

    def rate(t: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.where((t >= at_s) & (t < at_s + for_s), burst, base)

    return rate


# The loop


@dataclass(frozen=True)
class AutoscaleResult:
    scaler: str
    attainment: float
    """Share of all requests within both SLOs."""
    gpu_hours: float
    requests: int
    timeline: list[tuple[float, int, int, float]]
    """Per control period: (time s, replicas, ready pods, attainment of the requests that
    arrived in that period)."""
    outcomes: SimResult
    ok: npt.NDArray[np.bool_]
    """Per request: met both SLOs."""
    by_role: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)
    """A P/D pool's roles: per control period (time s, the role's replicas, its ready pods)."""

    def recovery_s(
        self, after_s: float, window_s: float = 60.0, within: float = 0.05
    ) -> float | None:
        """Seconds from ``after_s`` (the step) until the requests arriving in a ``window_s``
        window that starts after it meet the SLOs again at the pre-step level (the 120 s before
        it) less ``within``: the end of the first such window, less ``after_s``. None: never
        within the run. Relative to the pre-step level because some requests miss at any pod
        count (Mooncake's longest prompts)."""
        ok, arrival = self.ok, self.outcomes.arrival
        before = ok[(arrival >= after_s - 120.0) & (arrival < after_s)]
        if not before.size:
            return None
        level = float(before.mean()) - within
        for t, _, _, _ in self.timeline:
            if t - window_s < after_s:
                continue
            now = ok[(arrival >= t - window_s) & (arrival < t)]
            if now.size and float(now.mean()) >= level:
                return t - after_s
        return None


def _candidates(
    sim: Simulation, pods: Sequence[int], factor: float, scale: Collection[int] | None = None
) -> list[Candidate]:
    """The pods as the router sees them (scraped gauges, its in-flight counts), their load
    scaled by ``factor`` (the same work over fewer pods); with ``scale``, only those pods'
    (a P/D pool's one role)."""
    v = sim.view
    out = []
    for p in pods:
        g = v.scraped(p)
        server = v.servers[p]
        since, oldest, since_first = v.progress(p)
        pod = Candidate(
            name=server.name,
            kv_cache_percentage=g.kv_cache_usage,
            input_token_length=0,
            num_request_waiting=g.num_waiting,
            num_request_running=g.num_running,
            prefix_cache_score=0.0,
            prefill_tokens_in_flight=v.prefill_inflight[p],
            decode_tokens_in_flight=v.decode_inflight[p],
            role=server.role,  # type: ignore[arg-type]
            pod_class=server.profile.name,
            topology=server.topology,
            # Where each pod's work stands, as the router sends it (the service keeps each
            # pod's latest sample's); none on a pod scaled to no load (the idle counterfactual).
            ms_since_last_token=since,
            oldest_prefill_wait_ms=oldest,
            ms_since_last_first_token=since_first,
        )
        out.append(scaled(pod, factor if scale is None or p in scale else 1.0))
    return out


def _rows(candidates: Sequence[Candidate]) -> npt.NDArray[np.float64]:
    """Candidates -> the online predictor's rows (``online.FIELDS`` order), as the predicted
    router builds them from a candidate's own fields."""
    return np.asarray([candidate_row(c) for c in candidates], dtype=np.float64).reshape(
        len(candidates), len(FIELDS)
    )


_PREFIX = FIELDS.index("prefix_cache_score")
_RUNNING, _WAITING = FIELDS.index("num_request_running"), FIELDS.index("num_request_waiting")
PROFILE_SIZE: Final = 512
"""The service's request profile: the newest TTFT samples it keeps
(``CapacitySettings.profile_size``)."""
ARRIVAL_WINDOW_S: Final = 120.0
"""The service's replayed arrivals: those of the last this many seconds
(``CapacitySettings.arrival_window_s``)."""


class Probe:
    """Headroom's saturation level over a running simulation, with its router's online models,
    computed from what the service would hold at that instant (``backend/capacity/signals.py``):
    a profile of the newest ``profile_size`` requests whose first token it has seen (their TTFT
    samples), whatever their age, and, with ``next_interval``, the arrivals of the last
    ``arrival_window_s`` among them replayed from now with the mean output length of the newest
    finished ones (the level for the next interval); without, the pods are taken as they stand.

    Nothing the service could not know yet enters: a request still waiting for its first token
    is in no profile and no replay, and an output length counts once its request has finished
    (an earlier probe took the window's arrivals whole, their true output lengths included, and
    gave no level after a minute without arrivals, where the service reports the present one:
    docs/capacity.md, "The probe sees what the service sees")."""

    def __init__(
        self,
        sim: Simulation,
        router: PredictedLatency,
        profile_size: int = PROFILE_SIZE,
        representatives: int = 32,
        spread: bool = True,
        next_interval: bool = True,
        evenly: bool = False,
        arrival_window_s: float = ARRIVAL_WINDOW_S,
        present_weight: float = 0.0,
        served: bool = True,
        future_s: float = 0.0,
        record: LevelRecord | None = None,
        tpot_at_end: bool = False,
        lengths: bool = True,
    ) -> None:
        self.sim, self.router = sim, router
        self.profile_size, self.representatives = profile_size, representatives
        # The arrivals replayed: the service's ``arrival_window_s``.
        self.arrival_window_s = arrival_window_s
        # False: the 0/1 rule on the mean (the level before the residual spread, for A/B).
        self.spread = spread
        self.next_interval = next_interval
        # True: the window's arrivals evenly spaced over it (their mean rate, without their
        # bursts), for A/B against the replay.
        self.evenly = evenly
        # The service's ``present_weight``: the level mixes the present one and the next
        # interval's (0: the next interval's alone).
        self.present_weight = present_weight
        # The replay's tables scaled to the recent requests' measured latency (the service's
        # default); False: the models' tables as they are, for A/B.
        self.served = served
        # A reference, not a level the service can compute (``arrivals_at``): above 0, the
        # replay is of the trace's next ``future_s`` seconds of arrivals, not the past's.
        self.future_s = future_s
        # The level corrected by its own record (``backend.scheduling.record``), as the service
        # corrects it: each call at ``factor`` 1 is a tick of the record.
        self.record = record
        # The record's TPOT outcomes at the answer's end, as the service takes an upstream
        # EPP's TPOT sample (it carries no length); False: at the first token, as it takes one
        # that carries the length.
        self.tpot_at_end = tpot_at_end
        # False: no answer's length known (mean output 1, no TPOT sample's seconds), as the
        # service read an unchanged EPP's samples before each request's two were matched
        # (backend/sim/pairing.py); for A/B.
        self.lengths = lengths

    def _by(self, moments: FloatArray, now: float) -> npt.NDArray[np.intp]:
        """The requests whose sample the service holds at ``now`` (``moments``: when each is
        posted, NaN before it happens), in the order it took them in."""
        hi = int(np.searchsorted(self.sim.trace.arrival_s, now, side="right"))
        at = moments[:hi]
        with np.errstate(invalid="ignore"):
            held = np.flatnonzero(at <= now)
        return held[np.argsort(at[held], kind="stable")]

    def _seen(self, now: float) -> npt.NDArray[np.intp]:
        """The requests whose TTFT sample the service holds at ``now`` (first token by then),
        in the order it took them in (by first token)."""
        return self._by(self.sim._first, now)

    def _output_tokens(self, now: float) -> float:
        """The mean output length of the newest ``profile_size`` finished requests (the
        service's TPOT samples); 1 with none."""
        if not self.lengths:
            return 1.0
        newest = self._by(self.sim._done, now)[-self.profile_size :]
        return float(self.sim.trace.output_tokens[newest].mean()) if newest.size else 1.0

    def arrivals_at(self, now: float) -> Arrivals | None:
        """The arrivals of the last ``arrival_window_s`` whose first token the service has
        seen (times from the window's start) and the mean output length it holds: what the
        service keeps from the TTFT and TPOT samples."""
        if not self.next_interval:
            return None
        if self.future_s > 0.0:
            return self._unseen(now)
        trace, span = self.sim.trace, self.arrival_window_s
        start = now - span
        seen = self._seen(now)
        arrived = np.sort(trace.arrival_s[seen])
        inside = arrived[arrived > start] - start
        output = self._output_tokens(now)
        if not inside.size:
            return Arrivals((), span, output)
        times = tuple(inside.tolist())
        if self.evenly:
            times = tuple(((np.arange(inside.size) + 0.5) * span / inside.size).tolist())
        served = self.served_at(now) if self.served else None
        return Arrivals(times, span, output, served=served)

    def _unseen(self, now: float) -> Arrivals:
        """The traffic the pods will meet over the next ``future_s`` seconds (the trace's
        arrivals at their own times; the requests already sent are in the pods' gauges), with
        the latency and output length the service holds. Replaying the past stands in for
        exactly this; the two levels' difference is what forecasting the traffic could buy."""
        trace = self.sim.trace
        lo, hi = np.searchsorted(trace.arrival_s, [now, now + self.future_s], side="right")
        times = tuple((trace.arrival_s[lo:hi] - now).tolist())
        served = self.served_at(now) if self.served else None
        return Arrivals(times, self.future_s, self._output_tokens(now), served=served)

    def served_at(self, now: float) -> Served:
        """What the service keeps from the samples posted over the last ``arrival_window_s``:
        the first-token time of each request that arrived in it and has its first token, and
        the time per output token of each that finished in it, with the requests in the
        system the router saw on its pod (the sample's running + waiting)."""
        sim, trace, start = self.sim, self.sim.trace, now - self.arrival_window_s
        first, done = sim._first, sim._done
        lo, hi = np.searchsorted(trace.arrival_s, [start, now])
        ttft = []
        for i in range(lo, hi):
            route = sim.routes[i]
            if route is not None and route.ttft_row is not None and first[i] <= now:
                held = route.ttft_row[_RUNNING] + route.ttft_row[_WAITING]
                ttft.append((float(held), float(first[i] - trace.arrival_s[i])))
        tpot = []
        with np.errstate(invalid="ignore"):
            finished = np.flatnonzero((done[:hi] > start) & (done[:hi] <= now))
        for i in finished.tolist():
            route, out = sim.routes[i], int(trace.output_tokens[i])
            if route is not None and route.tpot_row is not None and out > 1 and self.lengths:
                held = route.tpot_row[_RUNNING] + route.tpot_row[_WAITING]
                tpot.append((float(held), float(done[i] - first[i]) / (out - 1)))
        return Served(tuple(ttft), tuple(tpot))

    def representatives_at(self, now: float) -> list[Representative]:
        """At most ``representatives`` of the profile, evenly spaced over it, the newest
        included (the service's ``spread``)."""
        profile = self._seen(now)[-self.profile_size :]
        if not profile.size:
            return []
        picks = np.linspace(0, profile.size - 1, min(self.representatives, profile.size))
        reps = []
        for i in profile[picks.round().astype(int)].tolist():
            # The prefix score the router saw for it at dispatch, as the service's profile takes
            # it from the TTFT samples. (Its prefix is cached *now* because it was served: a
            # score read from the caches now would make every recent request look like a hit.)
            route = self.sim.routes[i]
            row = route.ttft_row if route is not None else None
            reps.append(
                Representative(
                    int(self.sim.trace.input_tokens[i]), float(row[_PREFIX]) if row else 0.0
                )
            )
        return reps

    def outcomes_at(self, now: float) -> Outcomes:
        """What the samples posted by ``now`` measured over the record's horizon: each request's
        arrival and TTFT once its first token came, its first token and TPOT once it finished
        (the service's TTFT and TPOT samples)."""
        sim, trace = self.sim, self.sim.trace
        horizon = self.record.horizon_s if self.record is not None else self.arrival_window_s
        lo, hi = np.searchsorted(trace.arrival_s, [now - horizon - 1.0, now], side="right")
        idx = np.arange(lo, hi)
        # A request the router never placed (shed) posts no sample.
        idx = idx[np.array([sim.routes[i] is not None for i in idx.tolist()], np.bool_)]
        first, done = sim._first[idx], sim._done[idx]
        with np.errstate(invalid="ignore"):
            ttft = idx[first <= now]
            out = trace.output_tokens[idx]
            tpot = idx[(done <= now) & (out > 1)]
        arrival = trace.arrival_s
        return Outcomes(
            ttft_at_s=arrival[ttft].astype(np.float64),
            ttft_weight=np.ones(ttft.size),
            ttft_ms=(sim._first[ttft] - arrival[ttft]) * 1000.0,
            tpot_at_s=(sim._done if self.tpot_at_end else sim._first)[tpot].astype(np.float64),
            tpot_ms=(sim._done[tpot] - sim._first[tpot]) / (trace.output_tokens[tpot] - 1) * 1000.0,
        )

    def level(
        self, pods: Sequence[int], factor: float = 1.0, scale: Collection[int] | None = None
    ) -> float | None:
        sat = self.saturation(pods, factor, scale)
        return sat.level if sat is not None else None

    def saturation(
        self, pods: Sequence[int], factor: float = 1.0, scale: Collection[int] | None = None
    ) -> Saturation | None:
        """The level and its parts (``Saturation.present_level``, ``next_level``); None before
        the models are ready or with no recent request. ``factor`` scales the load of the pods
        in ``scale`` (default: all of ``pods``)."""
        predictors = list(self.router.predictors.values())
        if not pods or not predictors or not all(p.ready() for p in predictors):
            return None
        reps = self.representatives_at(self.sim.view.now)
        if not reps:
            return None
        predictor = predictors[0]  # one GPU class in an autoscaled pool

        def predict(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
            return predictor.predict(columns(_rows(rows)))

        def meet(
            rows: Sequence[Candidate],
            ttft: FloatArray,
            tpot: FloatArray,
            ttft_slo_ms: float | None,
            tpot_slo_ms: float | None,
        ) -> FloatArray:
            cols = columns(_rows(rows))
            return predictor.meet_probability(cols, ttft, tpot, ttft_slo_ms, tpot_slo_ms)

        slo = self.sim.config.slo
        sat = saturation(
            _candidates(self.sim, pods, factor, scale),
            reps,
            self.router.config.policy,
            slo.ttft_ms,
            slo.tpot_ms,
            predict,
            meet if self.spread else None,
            self.arrivals_at(self.sim.view.now),
            self.present_weight,
            # The service's mean answer length (its TPOT samples'), for the decode pods' queue.
            self._output_tokens(self.sim.view.now) if self.lengths else None,
        )
        if self.record is None or factor != 1.0:
            return sat
        now = self.sim.view.now
        bias = self.record.bias(now, self.outcomes_at(now), slo.ttft_ms, slo.tpot_ms)
        self.record.add(now, sat)
        return corrected(sat, bias)


@dataclass
class _Group:
    """Pods scaled together: a pool's, or one role's of a P/D pool."""

    role: str
    fleet: Fleet
    scaler: Scaler
    routable: list[int]
    """The view's list the router picks this group's pods from: kept the ready ones."""
    wanted: deque[tuple[float, int]] = field(default_factory=deque)


def run_autoscaled(
    trace: Trace,
    pods: Sequence[PodSpec],
    router: PredictedLatency,
    scaler: Scaler | Mapping[str, Scaler],
    fleet: Fleet | Mapping[str, Fleet],
    slo: Slo,
    seed: int = 0,
    period_s: float = 15.0,
    stabilise_down_s: float = 300.0,
    measure_from_s: float = 0.0,
    present_weight: float | None = None,
) -> AutoscaleResult:
    """Run ``trace`` through ``len(pods)`` pod slots, of which the fleet's ready ones take
    traffic, with ``scaler`` deciding at every control period. The trace is used as given
    (spread its ties beforehand). Attainment and GPU-hours count from ``measure_from_s`` (after
    a warm-up in which the scaler settles) to the last arrival. The saturation level a scaler
    reads is the pods' as they stand, or with ``present_weight`` the service's mix of that and
    the next interval's (the recent arrivals replayed).

    A P/D pool (``pods`` with prefill and decode roles) takes a fleet and a scaler per role
    (mappings keyed by ``ROLES``), as a cluster scales the two Deployments apart: each role's
    scaler reads its own pods' gauges and replica count, and a level with only its own pods'
    load scaled (``role_replicas``' question); the HPA's behaviour applies to each alone."""
    # The recorder hands the router every decision and keeps the samples an EPP would post.
    recorder = Recorder(router)
    sim = Simulation(trace, pods, recorder, SimConfig(slo=slo, seed=seed, spread_ties=False))
    groups = _groups(sim, scaler, fleet)
    if len(pods) != sum(g.fleet.slots for g in groups):
        raise ValueError("one pod spec per fleet slot")
    for g in groups:
        g.routable[:] = g.fleet.pods("ready")
    probe = (
        Probe(sim, router, next_interval=False)
        if present_weight is None
        else Probe(sim, router, present_weight=present_weight)
    )
    servers = sim.servers

    def busy(p: int) -> bool:
        return bool(servers[p].running or servers[p].waiting) or sim.view.dispatched[p] > 0

    def load(p: int) -> int:
        return len(servers[p].running) + len(servers[p].waiting)

    def recent(seconds: float) -> Trace:
        now = sim.view.now
        return trace.select((trace.arrival_s >= now - seconds) & (trace.arrival_s < now))

    posted: list[SampleRow] = []
    posted_at: list[float] = []

    def samples(seconds: float) -> list[SampleRow]:
        fresh = rows_from_observations(recorder.take())
        posted.extend(fresh)
        posted_at.extend(r.time_s for r in fresh)
        return posted[bisect_left(posted_at, sim.view.now - seconds) :]

    def ready() -> list[int]:
        return sorted(p for g in groups for p in g.fleet.pods("ready"))

    def level_of(g: _Group) -> Callable[[Sequence[int], float], float | None]:
        if len(groups) == 1:
            return probe.level

        def role_level(own: Sequence[int], factor: float) -> float | None:
            # The whole pool's level, only this role's pods' load scaled.
            return probe.level(ready(), factor, scale=own)

        return role_level

    def gpu(now: float) -> float:
        return sum(g.fleet.gpu_hours(now) for g in groups)

    def settling() -> bool:
        return any(g.fleet.pods("draining") or g.fleet.pods("starting") for g in groups)

    horizon = float(trace.arrival_s[-1]) if len(trace) else 0.0
    gpu_hours: float | None = None
    gpu_before: float | None = None
    timeline: list[tuple[float, int, int, float]] = []
    by_role: dict[str, list[tuple[float, int, int]]] = {g.role: [] for g in groups}
    t, more = 0.0, True
    next_period = 0.0
    while more or settling():
        more = sim.run_until(t)
        sim.view.now = t
        for g in groups:
            g.fleet.advance(t, busy)
        if t >= next_period:
            for g in groups:
                _control(g, sim, t, stabilise_down_s, level_of(g), recent, samples, load)
                by_role[g.role].append((t, g.fleet.replicas, len(g.fleet.pods("ready"))))
            replicas = sum(g.fleet.replicas for g in groups)
            timeline.append((t, replicas, len(ready()), math.nan))
            next_period = t + period_s
            if gpu_before is None and t >= measure_from_s:
                gpu_before = gpu(t)
            if gpu_hours is None and t >= horizon:
                gpu_hours = gpu(t)  # over the traffic, not the tail's draining
        for g in groups:
            g.routable[:] = g.fleet.pods("ready")
        if not more and not settling():
            break
        ready_times = [r for g in groups for r in g.fleet.ready_times() if r > t]
        t = min([next_period, *ready_times])
    result = sim.run()  # nothing is left to process: this collects the outcomes
    measured = result.arrival >= measure_from_s
    end = gpu_hours if gpu_hours is not None else gpu(t)
    return AutoscaleResult(
        scaler=groups[0].scaler.name if len(groups) == 1 else _role_names(groups),
        attainment=float(meets_slo(result, slo)[measured].mean()) if measured.any() else 1.0,
        gpu_hours=end - (gpu_before or 0.0),
        requests=len(trace),
        timeline=_per_period(timeline, result, slo, trace, period_s),
        outcomes=result,
        ok=meets_slo(result, slo),
        by_role=by_role if len(groups) > 1 else {},
    )


def _groups(
    sim: Simulation, scaler: Scaler | Mapping[str, Scaler], fleet: Fleet | Mapping[str, Fleet]
) -> list[_Group]:
    """One group for a pool of one role; one per role of a P/D pool, whose fleets must hold
    exactly that role's pods."""
    view = sim.view
    if isinstance(fleet, Fleet) and not isinstance(scaler, Mapping):
        if view.prefill_pods:
            raise ValueError("a P/D pool takes a fleet and a scaler per role")
        return [_Group("", fleet, scaler, view.decode_pods)]
    if not isinstance(fleet, Mapping) or not isinstance(scaler, Mapping):
        raise ValueError("give both a fleet and a scaler per role, or one of each")
    if set(fleet) != set(ROLES) or set(scaler) != set(ROLES):
        raise ValueError(f"a P/D pool takes a fleet and a scaler for each of {ROLES}")
    groups = [
        _Group("prefill", fleet["prefill"], scaler["prefill"], view.prefill_pods),
        _Group("decode", fleet["decode"], scaler["decode"], view.decode_pods),
    ]
    for g, members in zip(groups, (view.prefill_pods, view.decode_pods), strict=True):
        if sorted(g.fleet.indices) != sorted(members):
            raise ValueError(f"the {g.role} fleet's slots must be the pool's {g.role} pods")
    return groups


def _role_names(groups: Sequence[_Group]) -> str:
    names = {g.scaler.name for g in groups}
    return names.pop() if len(names) == 1 else "+".join(f"{g.role}:{g.scaler.name}" for g in groups)


def _control(
    g: _Group,
    sim: Simulation,
    now: float,
    stabilise_down_s: float,
    level: Callable[[Sequence[int], float], float | None],
    recent: Callable[[float], Trace],
    samples: Callable[[float], list[SampleRow]],
    load: Callable[[int], int],
) -> None:
    """One control period of one group: its scaler reads its pods, the HPA's behaviour acts."""
    gauges = {}
    for p in g.fleet.pods("ready"):
        s = sim.view.scraped(p)
        gauges[p] = PodGauges(s.kv_cache_usage, s.num_waiting, s.num_running)
    obs = Observation(
        now, g.fleet.replicas, len(g.fleet.pods("starting")), gauges, level, recent, samples
    )
    want = g.scaler.desired(obs)
    g.wanted.append((now, want))
    while g.wanted[0][0] < now - stabilise_down_s:
        g.wanted.popleft()
    if want < g.fleet.replicas:
        # HPA's scale-down stabilisation: the highest recommendation of the window.
        want = min(g.fleet.replicas, max(w for _, w in g.wanted))
    g.fleet.scale_to(want, now, load)


def _per_period(
    timeline: list[tuple[float, int, int, float]],
    result: SimResult,
    slo: Slo,
    trace: Trace,
    period_s: float,
) -> list[tuple[float, int, int, float]]:
    """Each period's attainment over the requests that arrived in the period before it."""
    ok = meets_slo(result, slo)
    out = []
    for t, replicas, ready, _ in timeline:
        mask = (trace.arrival_s >= t - period_s) & (trace.arrival_s < t)
        out.append((t, replicas, ready, float(ok[mask].mean()) if mask.any() else math.nan))
    return out
