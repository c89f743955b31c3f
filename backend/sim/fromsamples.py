"""A pool's own traffic as a replay, built from the samples its EPP posts; the simulated pod
calibrated to it; and the smallest pod count that keeps its SLO attainment at a target.

Pure: plain rows in (``SampleRow``), a ``Trace`` and numbers out. The service side
(``backend/capacity/desired.py``) reads the rows from the samples table.

What the wire gives and how each part of the workload is read from it:

* **Arrivals**: a TTFT sample is taken at the first token, so the request arrived at the
  sample's time minus its TTFT.
* **Prompt lengths**: ``input_token_length`` of the TTFT sample.
* **Output lengths**: an EPP posts a request's TTFT sample (at the first token) and its TPOT
  sample (at completion) with the same dispatch-time features and pod, so the two are paired
  on (pod, features); then ``output = 1 + (t_done - t_first) / tpot``. A TTFT sample with no
  partner (a one-token answer, a P/D request whose phases ran on two pods, a dropped sample)
  gets a length drawn from the paired lengths (``Workload.drawn_outputs`` counts them).
* **Prefix reuse**: the prefix score says how much of the prompt was cached where it ran. With
  a ``prefix_group`` (a session or shared-system-prompt id a client may send) a request's
  cached blocks are its group's previous prompt's leading blocks; without one, those of the
  most recent earlier request long enough to hold them (a conversation-like chain; the reuse
  *amount* is kept, its *structure* is a guess).
* **Pods**: the pod names and classes seen.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.gpu import available_profiles, load_profile
from backend.sim.online import FIELDS
from backend.sim.pool import build_pool
from backend.sim.replay import Observation, Recorder
from backend.sim.report import summarize
from backend.sim.routers import make_policy
from backend.sim.traces.loader import UNIT_TOKENS, Trace
from backend.sim.view import Slo

_CHAIN_LOOKBACK: Final = 256
"""Earlier requests searched for a prefix donor when a sample names no group."""
DEFAULT_OUTPUT_TOKENS: Final = 128
"""Output length given to every request when no TTFT sample could be paired at all."""
QUANTILES: Final = tuple(np.linspace(0.1, 0.9, 9))
"""Where simulated and observed latency distributions are compared."""


@dataclass(frozen=True, slots=True)
class SampleRow:
    target: str  # "ttft" or "tpot"
    time_s: float  # when it was observed (any origin, seconds)
    latency_ms: float
    input_tokens: int
    prefix_score: float  # share of the prompt cached on the pod that served it
    pod: str | None
    pod_class: str | None = None
    key: Hashable = ()  # the dispatch-time features: equal for a request's TTFT and TPOT rows
    prefix_group: str | None = None


@dataclass(frozen=True)
class Workload:
    trace: Trace
    pods: tuple[str, ...]
    pod_classes: tuple[str, ...]
    observed_ttft_ms: np.ndarray
    observed_tpot_ms: np.ndarray
    paired_outputs: int
    drawn_outputs: int
    grouped: int  # requests whose prefix came from a sent prefix_group

    @property
    def rate_rps(self) -> float:
        return len(self.trace) / self.trace.duration_s if self.trace.duration_s > 0 else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "requests": len(self.trace),
            "duration_s": round(self.trace.duration_s, 1),
            "rate_rps": round(self.rate_rps, 3),
            "pods": len(self.pods),
            "pod_classes": list(self.pod_classes),
            "outputs_paired": self.paired_outputs,
            "outputs_drawn": self.drawn_outputs,
            "prefix_grouped": self.grouped,
        }


_INPUT, _PREFIX = FIELDS.index("input_token_length"), FIELDS.index("prefix_cache_score")


def rows_from_observations(observations: Sequence[Observation]) -> list[SampleRow]:
    """The simulator's EPP samples (``backend.sim.replay.Recorder``) as rows, with nothing the
    wire does not carry: time, label, features, pod."""
    return [
        SampleRow(
            o.target,
            o.time_s,
            o.label_ms,
            int(o.row[_INPUT]),
            float(o.row[_PREFIX]),
            o.pod,
            key=tuple(o.row),
        )
        for o in observations
    ]


def record(
    trace: Trace, pods: int, gpu: str, policy: str, slo: Slo, seed: int = 0
) -> tuple[SimResult, list[Observation]]:
    """Run ``trace`` on ``pods`` pods of ``gpu`` routed by ``policy``: the outcome, and the
    samples an EPP would have posted meanwhile (the loop check's and the benchmarks' source)."""
    fabric = TransferConfig(kv_bytes_per_token=load_profile(gpu).kv_bytes_per_token)
    recorder = Recorder(make_policy(policy, fabric, seed))
    config = SimConfig(slo, seed=seed, transfer=fabric)
    result = Simulation(trace, build_pool(pods, gpu), recorder, config).run()
    return result, recorder.take()


def build_workload(rows: Sequence[SampleRow], seed: int = 0) -> Workload:
    """The requests the samples describe, as a replayable trace (see the module doc)."""
    ttft = sorted((r for r in rows if r.target == "ttft"), key=lambda r: r.time_s)
    tpot = sorted((r for r in rows if r.target == "tpot"), key=lambda r: r.time_s)
    if not ttft:
        raise ValueError("no TTFT sample: nothing to replay")
    # Pair each TPOT sample with the oldest open TTFT sample of the same (pod, features).
    open_: dict[tuple[str | None, Hashable], deque[int]] = defaultdict(deque)
    outputs = np.zeros(len(ttft), np.int64)
    tpot_i = 0
    for i, r in enumerate(ttft):
        while tpot_i < len(tpot) and tpot[tpot_i].time_s < r.time_s:
            _pair(tpot[tpot_i], open_, ttft, outputs)
            tpot_i += 1
        open_[(r.pod, r.key)].append(i)
    for t in tpot[tpot_i:]:
        _pair(t, open_, ttft, outputs)
    paired = outputs > 0
    rng = np.random.default_rng(seed)
    pool = outputs[paired]
    drawn = int((~paired).sum())
    outputs[~paired] = rng.choice(pool, drawn) if len(pool) else DEFAULT_OUTPUT_TOKENS

    arrival = np.array([r.time_s - r.latency_ms / 1000.0 for r in ttft])
    order = np.argsort(arrival, kind="stable")
    arrival = arrival[order] - arrival[order][0]
    reqs = [ttft[i] for i in order]
    outputs = outputs[order]
    ids, offsets, grouped = _prefix_blocks(reqs)
    trace = Trace(
        name="samples",
        arrival_s=arrival.astype(np.float64),
        input_tokens=np.array([max(1, r.input_tokens) for r in reqs], np.int64),
        output_tokens=np.maximum(outputs, 1).astype(np.int64),
        hash_ids=ids,
        hash_offsets=offsets,
        prefix_source="samples",
    )
    return Workload(
        trace=trace,
        pods=tuple(sorted({r.pod for r in rows if r.pod})),
        pod_classes=tuple(sorted({r.pod_class for r in rows if r.pod_class})),
        observed_ttft_ms=np.array([r.latency_ms for r in ttft]),
        observed_tpot_ms=np.array([r.latency_ms for r in tpot]),
        paired_outputs=int(paired.sum()),
        drawn_outputs=drawn,
        grouped=grouped,
    )


def _pair(
    t: SampleRow,
    open_: dict[tuple[str | None, Hashable], deque[int]],
    ttft: Sequence[SampleRow],
    outputs: np.ndarray,
) -> None:
    queue = open_.get((t.pod, t.key))
    if not queue or not t.latency_ms > 0:
        return
    i = queue.popleft()
    gap_ms = (t.time_s - ttft[i].time_s) * 1000.0
    outputs[i] = 1 + max(1, round(gap_ms / t.latency_ms))


def _prefix_blocks(reqs: Sequence[SampleRow]) -> tuple[np.ndarray, np.ndarray, int]:
    """Block ids per request: cached leading blocks shared with a donor, the rest fresh."""
    fresh = iter(range(1 << 62))
    blocks: list[list[int]] = []
    last_of_group: dict[str, int] = {}
    grouped = 0
    for i, r in enumerate(reqs):
        n = -(-max(1, r.input_tokens) // UNIT_TOKENS)
        shared = min(n, round(min(max(r.prefix_score, 0.0), 1.0) * n))
        donor: list[int] = []
        if r.prefix_group is not None and r.prefix_group in last_of_group:
            donor = blocks[last_of_group[r.prefix_group]]
            grouped += 1
        elif shared:
            for j in range(i - 1, max(-1, i - 1 - _CHAIN_LOOKBACK), -1):
                if len(blocks[j]) >= shared:
                    donor = blocks[j]
                    break
        head = donor[:shared]
        blocks.append(head + [next(fresh) for _ in range(n - len(head))])
        if r.prefix_group is not None:
            last_of_group[r.prefix_group] = i
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
    ids = np.array([h for b in blocks for h in b], np.int64)
    return ids, offsets, grouped


# --- simulation of a workload ---------------------------------------------------------------


@dataclass(frozen=True)
class PodModel:
    """The simulated pod: a shipped GPU profile and a factor on every iteration's cost."""

    profile: str
    scale: float = 1.0


@dataclass(frozen=True)
class RunResult:
    slo_attainment: float
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray


def simulate(
    trace: Trace, pods: int, pod: PodModel, policy: str, slo: Slo, seed: int = 0
) -> RunResult:
    """``trace`` on ``pods`` pods of ``pod``, routed by the simulator policy ``policy``."""
    specs = build_pool(pods, pod.profile)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pod.profile).kv_bytes_per_token)
    sim = Simulation(
        trace,
        specs,
        make_policy(policy, fabric, seed),
        SimConfig(
            slo,
            seed=seed,
            transfer=fabric,
            prefill_scale=pod.scale,
            decode_scale=pod.scale,
            spread_ties=False,  # arrivals from samples are exact
        ),
    )
    result = sim.run()
    attained = summarize(result, slo)["slo_attainment"]
    return RunResult(float(attained or 0.0), result.ttft_ms, result.tpot_ms)


def distribution_error(sim_ms: np.ndarray, obs_ms: np.ndarray) -> float:
    """Mean |log(simulated / observed)| over the deciles p10..p90 (0: the same distribution;
    0.1: about 10 % off)."""
    s, o = sim_ms[np.isfinite(sim_ms) & (sim_ms > 0)], obs_ms[np.isfinite(obs_ms) & (obs_ms > 0)]
    if not len(s) or not len(o):
        return math.inf
    return float(np.mean(np.abs(np.log(np.quantile(s, QUANTILES) / np.quantile(o, QUANTILES)))))


@dataclass(frozen=True)
class Calibration:
    pod: PodModel
    error: float  # mean of the TTFT and TPOT distribution errors at the pick
    ttft_error: float
    tpot_error: float
    tried: list[dict[str, float | str]] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        return {
            "profile": self.pod.profile,
            "scale": round(self.pod.scale, 3),
            "error": round(self.error, 4),
            "ttft_error": round(self.ttft_error, 4),
            "tpot_error": round(self.tpot_error, 4),
            "simulations": len(self.tried),
        }


def calibrate(
    workload: Workload,
    policy: str,
    slo: Slo,
    *,
    profiles: Sequence[str] | None = None,
    scale_range: tuple[float, float] = (0.4, 2.5),
    steps: int = 6,
    seed: int = 0,
) -> Calibration:
    """The shipped profile and cost factor whose simulation of ``workload`` on the pool's pod
    count best reproduces the observed TTFT and TPOT distributions.

    Per profile a golden-section search on log(scale) over ``scale_range`` (``steps``
    evaluations after the first two): the error is close to unimodal in the scale, since a
    slower pod shifts every latency up. The profile with the lowest error wins."""
    pods = max(1, len(workload.pods))
    tried: list[dict[str, float | str]] = []
    best: Calibration | None = None
    for profile in profiles or available_profiles():

        def error(log_scale: float, profile: str = profile) -> tuple[float, float, float]:
            try:
                run = simulate(
                    workload.trace, pods, PodModel(profile, math.exp(log_scale)), policy, slo, seed
                )
            except (RuntimeError, MemoryError):
                # The profile's KV cache cannot hold the workload's longest requests.
                tried.append({"profile": profile, "scale": math.exp(log_scale), "error": math.inf})
                return math.inf, math.inf, math.inf
            e_ttft = distribution_error(run.ttft_ms, workload.observed_ttft_ms)
            e_tpot = distribution_error(run.tpot_ms, workload.observed_tpot_ms)
            both = [e for e in (e_ttft, e_tpot) if math.isfinite(e)]
            total = float(np.mean(both)) if both else math.inf
            tried.append(
                {"profile": profile, "scale": round(math.exp(log_scale), 4), "error": total}
            )
            return total, e_ttft, e_tpot

        log_scale, (total, e_ttft, e_tpot) = _golden(
            error, math.log(scale_range[0]), math.log(scale_range[1]), steps
        )
        if best is None or total < best.error:
            best = Calibration(PodModel(profile, math.exp(log_scale)), total, e_ttft, e_tpot)
    assert best is not None
    return replace(best, tried=tried)


_PHI: Final = (math.sqrt(5) - 1) / 2


def _golden(
    f: Callable[[float], tuple[float, float, float]], lo: float, hi: float, steps: int
) -> tuple[float, tuple[float, float, float]]:
    """Golden-section minimum of ``f(x)[0]`` on [lo, hi]: the best point evaluated."""
    a, b = lo, hi
    c, d = b - _PHI * (b - a), a + _PHI * (b - a)
    fc, fd = f(c), f(d)
    seen = [(c, fc), (d, fd)]
    for _ in range(steps):
        if fc[0] <= fd[0]:
            b, d, fd = d, c, fc
            c = b - _PHI * (b - a)
            fc = f(c)
            seen.append((c, fc))
        else:
            a, c, fc = c, d, fd
            d = a + _PHI * (b - a)
            fd = f(d)
            seen.append((d, fd))
    return min(seen, key=lambda p: p[1][0])


# --- desired replicas -----------------------------------------------------------------------


PLATEAU_TOLERANCE: Final = 0.01
"""When no pod count reaches the target, how close to the most pods' attainment is enough."""


@dataclass(frozen=True)
class Desired:
    replicas: int
    met: bool
    """False: even ``hi`` pods miss the target; ``replicas`` is then the fewest pods within
    ``PLATEAU_TOLERANCE`` of what ``hi`` pods attain (requests whose prompt alone outlasts the
    TTFT SLO miss on any number of pods: more pods than the plateau buy nothing)."""
    attainment: float  # at ``replicas`` pods
    evaluated: dict[int, float]  # pod count -> simulated attainment


def smallest_meeting(
    attainment: Callable[[int], float],
    target: float,
    lo: int,
    hi: int,
    plateau: float = PLATEAU_TOLERANCE,
) -> Desired:
    """The smallest pod count in [lo, hi] whose attainment reaches ``target``, by bisection
    (or, if none does, the start of the plateau: the fewest within ``plateau`` of what ``hi``
    pods attain; see ``Desired.met``).

    Attainment is taken to rise with the pod count (more pods, less queueing); the search
    evaluates about log2(hi - lo) counts."""
    if lo < 1 or hi < lo:
        raise ValueError("want 1 <= lo <= hi")
    if plateau < 0:
        raise ValueError("plateau must be >= 0")
    seen: dict[int, float] = {}

    def at(n: int) -> float:
        if n not in seen:
            seen[n] = attainment(n)
        return seen[n]

    met = at(hi) >= target
    if not met:
        target = at(hi) - plateau
    a, b = lo, hi  # invariant: at(b) meets the target; every count below a misses it
    while a < b:
        mid = (a + b) // 2
        if at(mid) >= target:
            b = mid
        else:
            a = mid + 1
    return Desired(b, met, at(b), seen)


def desired_replicas(
    workload: Workload,
    pod: PodModel,
    policy: str,
    slo: Slo,
    target: float,
    *,
    max_replicas: int,
    min_replicas: int = 1,
    plateau: float = PLATEAU_TOLERANCE,
    seed: int = 0,
) -> Desired:
    """The smallest pod count at which ``workload`` (the pool's recent traffic at its own rate)
    on the calibrated ``pod`` keeps SLO attainment at ``target``.

    A pod count at which the simulated pods break down (a request near the KV cache's size
    that preemption cannot make room for among the others) counts as attaining nothing: so
    few pods do not hold the traffic. At ``max_replicas`` the error propagates: then no count
    serves it and there is no answer."""

    def attainment(n: int) -> float:
        try:
            return simulate(workload.trace, n, pod, policy, slo, seed).slo_attainment
        except (RuntimeError, MemoryError):
            if n >= max_replicas:
                raise
            return 0.0

    return smallest_meeting(
        attainment,
        target,
        min_replicas,
        max_replicas,
        plateau,
    )


MIN_REQUESTS: Final = 20
"""Fewer requests than this in the samples: no estimate (a replay of a handful of requests
says nothing about the pod count)."""
CALIBRATION_STEPS: Final = 3
"""Golden-section steps per profile: 5 simulations each (measured by bench/desired_replicas.py
to keep an 8-pod pool's run within a minute of one core)."""


@dataclass(frozen=True)
class ReplicaEstimate:
    desired: Desired
    workload: Workload
    calibration: Calibration
    calibrated: bool
    """True: this call calibrated the pod (its simulations count); False: it was given one."""

    @property
    def simulations(self) -> int:
        return (len(self.calibration.tried) if self.calibrated else 0) + len(self.desired.evaluated)


def estimate_replicas(
    rows: Sequence[SampleRow],
    slo: Slo,
    target: float,
    *,
    router: str,
    max_replicas: int,
    min_replicas: int = 1,
    calibrated: Calibration | None = None,
    calibration_steps: int = CALIBRATION_STEPS,
    plateau: float = PLATEAU_TOLERANCE,
    seed: int = 0,
) -> ReplicaEstimate | None:
    """Desired replicas from a pool's samples: rebuild the requests (``build_workload``),
    calibrate the pod unless ``calibrated`` is given, and bisect on the pod count over
    replays routed by the simulator policy ``router``. None when the samples hold fewer than
    ``MIN_REQUESTS`` requests. The one path from samples to a pod count: the service's
    periodic job (``backend/capacity/desired.py``) and the simulator's autoscaler
    (``backend/sim/autoscale.py``) both call it."""
    if sum(r.target == "ttft" for r in rows) < MIN_REQUESTS:
        return None
    workload = build_workload(rows, seed=seed)
    hi = max(max_replicas, 1)

    def bisect(pod: PodModel) -> Desired:
        return desired_replicas(
            workload,
            pod,
            router,
            slo,
            target,
            max_replicas=hi,
            min_replicas=min(max(min_replicas, 1), hi),
            plateau=plateau,
            seed=seed,
        )

    if calibrated is not None:
        try:
            return ReplicaEstimate(bisect(calibrated.pod), workload, calibrated, False)
        except (RuntimeError, MemoryError):
            # The kept pod's KV cache cannot hold a request of this window (one longer than
            # any it was calibrated on): calibrate again, which rules such profiles out.
            pass
    cal = calibrate(workload, router, slo, steps=calibration_steps, seed=seed)
    return ReplicaEstimate(bisect(cal.pod), workload, cal, True)
