"""A pool's own traffic as a replay, built from the samples its EPP posts; the simulated pod
calibrated to it; and the smallest pod count that keeps its SLO attainment at a target.

Pure: plain rows in (``SampleRow``), a ``Trace`` and numbers out. The service side
(``backend/capacity/desired.py``) reads the rows from the samples table.

What the wire gives and how each part of the workload is read from it:

* **Arrivals**: a TTFT sample is taken at the first token, so the request arrived at the
  sample's time minus its TTFT.
* **Prompt lengths**: ``input_token_length`` of the TTFT sample.
* **Output lengths**: an EPP posts a request's TTFT sample (at the first token) and its TPOT
  sample (at completion) from the same pod, prompt and dispatch-time load, but with other
  fields that differ (upstream's TPOT sample: prefix score 0, refreshed gauges, no length), so
  the two are matched on what they share (``backend/sim/pairing.py``); then
  ``output = 1 + (t_done - t_first) / tpot``. A TTFT sample with no
  partner (a one-token answer, a P/D request whose phases ran on two pods, a dropped sample)
  gets a length drawn from the paired lengths (``Workload.drawn_outputs`` counts them).
* **Prefix reuse**: the prefix score says how much of the prompt was cached where it ran. With
  a ``prefix_group`` (a session or shared-system-prompt id a client may send) a request's
  cached blocks are its group's previous prompt's leading blocks; without one, those of an
  earlier request: the most recent whose own leading blocks were a hit at least that long,
  else the most recent long enough (``_prefix_blocks``; the reuse *amount* is kept, its
  *structure* is a guess).
* **Pods**: the pod names and classes seen.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.gpu import available_profiles, load_profile
from backend.sim.online import FIELDS
from backend.sim.pairing import DISPATCH_LOAD, PREFILL, Pairing, answer_length
from backend.sim.pool import build_pool
from backend.sim.replay import Observation, Recorder
from backend.sim.report import met_slo, summarize
from backend.sim.routers import make_policy
from backend.sim.routers.base import RoutingPolicy
from backend.sim.traces.loader import UNIT_TOKENS, Trace
from backend.sim.view import Slo

_CHAIN_LOOKBACK: Final = 256
"""Earlier requests searched for a prefix donor when a sample names no group."""
DEFAULT_OUTPUT_TOKENS: Final = 128
"""Output length given to every request when no TTFT sample could be paired at all."""
QUANTILES: Final = tuple(np.linspace(0.1, 0.9, 9))
Router = str | Callable[[TransferConfig, int], RoutingPolicy]
"""A simulator policy name, or (fabric, seed) -> a fresh policy (a policy with options, such as
the pool's active one as the advisor runs it)."""


def _router(policy: Router, fabric: TransferConfig, seed: int) -> RoutingPolicy:
    return make_policy(policy, fabric, seed) if isinstance(policy, str) else policy(fabric, seed)


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
    # The dispatch-time load both of a request's samples carry (``DISPATCH_LOAD``'s fields); it
    # tells apart open requests of one pod and prompt length (backend/sim/pairing.py).
    key: Hashable = ()
    prefix_group: str | None = None
    pod_type: int = 0  # the wire's code: under P/D a request's two samples name two pods


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
    prefill_pods: int = 0
    """Pods whose samples name them prefill endpoints (``pod_type`` "prefill"): under P/D
    disaggregation the pool is that many prefill pods and the rest decode pods, and the replay
    builds it so (``build_pool``'s split). 0: an aggregated pool (or one whose samples name no
    decode-side pod, which no P/D replay could route)."""

    @property
    def decode_pods(self) -> int:
        """The pods that are not prefill pods (all of them in an aggregated pool)."""
        return len(self.pods) - self.prefill_pods

    @property
    def rate_rps(self) -> float:
        return len(self.trace) / self.trace.duration_s if self.trace.duration_s > 0 else 0.0

    def summary(self) -> dict[str, object]:
        return {
            "requests": len(self.trace),
            "duration_s": round(self.trace.duration_s, 1),
            "rate_rps": round(self.rate_rps, 3),
            "pods": len(self.pods),
            "prefill_pods": self.prefill_pods,
            "pod_classes": list(self.pod_classes),
            "outputs_paired": self.paired_outputs,
            "outputs_drawn": self.drawn_outputs,
            "prefix_grouped": self.grouped,
        }


_INPUT, _PREFIX = FIELDS.index("input_token_length"), FIELDS.index("prefix_cache_score")
_LOAD: Final = tuple(FIELDS.index(name) for name in DISPATCH_LOAD)
_POD_TYPE: Final = FIELDS.index("pod_type")


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
            key=tuple(int(o.row[i]) for i in _LOAD),
            pod_type=int(o.row[_POD_TYPE]),
        )
        for o in observations
    ]


def record(
    trace: Trace,
    pods: int,
    gpu: str,
    policy: str,
    slo: Slo,
    seed: int = 0,
    *,
    prefill_scale: float = 1.0,
    decode_scale: float = 1.0,
    pd: str | None = None,
) -> tuple[SimResult, list[Observation]]:
    """Run ``trace`` on ``pods`` pods of ``gpu`` (its step costs scaled by the two factors;
    ``pd``: a P/D split such as "4:4", ``build_pool``'s) routed by ``policy``: the outcome, and
    the samples an EPP would have posted meanwhile (the loop check's and the benchmarks'
    source)."""
    fabric = TransferConfig(kv_bytes_per_token=load_profile(gpu).kv_bytes_per_token)
    recorder = Recorder(make_policy(policy, fabric, seed))
    config = SimConfig(
        slo,
        seed=seed,
        transfer=fabric,
        prefill_scale=prefill_scale,
        decode_scale=decode_scale,
    )
    result = Simulation(trace, build_pool(pods, gpu, pd), recorder, config).run()
    return result, recorder.take()


def build_workload(rows: Sequence[SampleRow], seed: int = 0, donors: Donors = "reused") -> Workload:
    """The requests the samples describe, as a replayable trace (see the module doc;
    ``donors``: how cached blocks are chained without a group, see ``_prefix_blocks``)."""
    ttft = sorted((r for r in rows if r.target == "ttft"), key=lambda r: r.time_s)
    tpot = sorted((r for r in rows if r.target == "tpot"), key=lambda r: r.time_s)
    if not ttft:
        raise ValueError("no TTFT sample: nothing to replay")
    outputs = answer_lengths(ttft, tpot)
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
    ids, offsets, grouped = _prefix_blocks(reqs, donors)
    trace = Trace(
        name="samples",
        arrival_s=arrival.astype(np.float64),
        input_tokens=np.array([max(1, r.input_tokens) for r in reqs], np.int64),
        output_tokens=np.maximum(outputs, 1).astype(np.int64),
        hash_ids=ids,
        hash_offsets=offsets,
        prefix_source="samples",
    )
    pods = tuple(sorted({r.pod for r in rows if r.pod}))
    prefill = {r.pod for r in rows if r.pod and r.pod_type == PREFILL}
    return Workload(
        trace=trace,
        pods=pods,
        pod_classes=tuple(sorted({r.pod_class for r in rows if r.pod_class})),
        observed_ttft_ms=np.array([r.latency_ms for r in ttft]),
        observed_tpot_ms=np.array([r.latency_ms for r in tpot]),
        paired_outputs=int(paired.sum()),
        drawn_outputs=drawn,
        grouped=grouped,
        prefill_pods=len(prefill) if len(prefill) < len(pods) else 0,
    )


def answer_lengths(ttft: Sequence[SampleRow], tpot: Sequence[SampleRow]) -> np.ndarray:
    """Each TTFT row's answer length, from its request's TPOT row (backend/sim/pairing.py);
    0 where none was matched. Both sequences sorted by time."""
    pairing: Pairing[int] = Pairing()
    outputs = np.zeros(len(ttft), np.int64)

    def close(t: SampleRow) -> None:
        match = (
            pairing.done(t.time_s, t.pod, t.input_tokens, t.key, t.pod_type)
            if t.latency_ms > 0
            else None
        )
        if match is not None:
            outputs[match[1]] = answer_length(match[0], t.time_s, t.latency_ms)

    tpot_i = 0
    for i, r in enumerate(ttft):
        while tpot_i < len(tpot) and tpot[tpot_i].time_s < r.time_s:
            close(tpot[tpot_i])
            tpot_i += 1
        pairing.first_token(r.time_s, r.pod, r.input_tokens, r.key, i, r.pod_type)
    for t in tpot[tpot_i:]:
        close(t)
    return outputs


Donors = Literal["reused", "recent"]


def _prefix_blocks(
    reqs: Sequence[SampleRow], donors: Donors = "reused"
) -> tuple[np.ndarray, np.ndarray, int]:
    """Block ids per request: cached leading blocks shared with a donor, the rest fresh.

    Without a group, the donor is an earlier request (of the last ``_CHAIN_LOOKBACK``) whose
    prompt is long enough. ``donors="reused"`` prefers the most recent one whose own leading
    blocks were themselves a cache hit at least that long, and only then the most recent one
    long enough (``"recent"``: always the latter). A hit says the prefix was cached on the pod
    that served it, so something reused it; a prefix that is reused (a shared system prompt, a
    conversation's history) tends to be reused again. Chaining to the most recent request
    instead starts a new prefix family whenever that request had missed, which splits one
    popular prefix into many: on the Azure code trace (32 tenants' system prompts) that
    replay found 7 points less SLO attainment than the true prefixes give (docs/benchmarks.md,
    "Replay fidelity")."""
    fresh = iter(range(1 << 62))
    blocks: list[list[int]] = []
    whole: list[int] = []  # each request's leading blocks that its prompt fills
    hit: list[int] = []  # leading blocks each request shares with its donor
    last_of_group: dict[str, int] = {}
    grouped = 0
    for i, r in enumerate(reqs):
        prompt = max(1, r.input_tokens)
        n = -(-prompt // UNIT_TOKENS)
        # Only whole blocks are shared, as vLLM caches only full blocks: a prompt's partial last
        # block, shared as another's whole one, gave one block id two sizes, and the replayed
        # pod's block accounting leaked (a replay of Mooncake's samples then failed with "one
        # request outgrew the KV cache"; docs/capacity.md, "How far any scaler can go").
        shared = min(prompt // UNIT_TOKENS, round(min(max(r.prefix_score, 0.0), 1.0) * n))
        donor: list[int] = []
        if r.prefix_group is not None and r.prefix_group in last_of_group:
            j = last_of_group[r.prefix_group]
            donor = blocks[j][: whole[j]]
            grouped += 1
        elif shared:
            long_enough: int | None = None
            for j in range(i - 1, max(-1, i - 1 - _CHAIN_LOOKBACK), -1):
                if whole[j] < shared:
                    continue
                if long_enough is None:
                    long_enough = j
                if donors == "recent" or hit[j] >= shared:
                    donor = blocks[j]
                    break
            else:
                donor = blocks[long_enough] if long_enough is not None else []
        head = donor[:shared]
        whole.append(prompt // UNIT_TOKENS)
        hit.append(len(head))
        blocks.append(head + [next(fresh) for _ in range(n - len(head))])
        if r.prefix_group is not None:
            last_of_group[r.prefix_group] = i
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
    ids = np.array([h for b in blocks for h in b], np.int64)
    return ids, offsets, grouped


# --- simulation of a workload ---------------------------------------------------------------


@dataclass(frozen=True)
class PodModel:
    """The simulated pod: a shipped GPU profile and factors on the prefill and the decode share
    of every iteration's cost (``backend.sim.cost.StepCost``)."""

    profile: str
    prefill_scale: float = 1.0
    decode_scale: float = 1.0

    @property
    def scale(self) -> float:
        """One number for both factors (their geometric mean): what displays and the stored
        desired-replicas row show; equal to each when they are equal."""
        return math.sqrt(self.prefill_scale * self.decode_scale)


@dataclass(frozen=True)
class RunResult:
    slo_attainment: float
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    ttft_attainment: float = 0.0
    """The share of the scored requests whose first token met the TTFT SLO (the P/D search
    sizes the prefill pods on it)."""
    decode_attainment: float = 0.0
    """A P/D pool's: the share of the scored requests the decode side served in time: within
    the TPOT SLO, and within the TTFT SLO unless the prefill pod handed them on already past
    it (the prefill side missed those). The P/D search sizes the decode pods on it."""


def simulate(
    trace: Trace,
    pods: int,
    pod: PodModel,
    policy: Router,
    slo: Slo,
    seed: int = 0,
    score_from_s: float | None = None,
    prefill_pods: int = 0,
) -> RunResult:
    """``trace`` on ``pods`` pods of ``pod``, routed by the simulator policy ``policy``; with
    ``prefill_pods`` > 0 a P/D pool of that many prefill pods and ``pods - prefill_pods`` decode
    pods. With ``score_from_s`` the attainment is that of the requests arriving from then on
    (the earlier ones are replayed all the same: they load the pods)."""
    if not 0 <= prefill_pods < pods:
        raise ValueError(f"a pool of {pods} pods cannot have {prefill_pods} prefill pods")
    specs = build_pool(
        pods, pod.profile, f"{prefill_pods}:{pods - prefill_pods}" if prefill_pods else None
    )
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pod.profile).kv_bytes_per_token)
    sim = Simulation(
        trace,
        specs,
        _router(policy, fabric, seed),
        SimConfig(
            slo,
            seed=seed,
            transfer=fabric,
            prefill_scale=pod.prefill_scale,
            decode_scale=pod.decode_scale,
            spread_ties=False,  # arrivals from samples are exact
        ),
    )
    result = sim.run()
    scored = (
        result.arrival >= score_from_s
        if score_from_s is not None
        else np.ones(result.arrival.shape, np.bool_)
    )
    if score_from_s is None:
        attained = float(summarize(result, slo)["slo_attainment"] or 0.0)
    else:
        attained = float(met_slo(result, slo)[scored].mean()) if scored.any() else 0.0
    first = (result.ttft_ms <= slo.ttft_ms)[scored]
    decoded = np.isfinite(result.done) & ((result.output <= 1) | (result.tpot_ms <= slo.tpot_ms))
    with np.errstate(invalid="ignore"):
        late_at_handoff = (result.handoff - result.arrival) * 1000.0 > slo.ttft_ms
    decode_side = (decoded & ((result.ttft_ms <= slo.ttft_ms) | late_at_handoff))[scored]
    return RunResult(
        attained,
        result.ttft_ms,
        result.tpot_ms,
        float(first.mean()) if first.size else 0.0,
        float(decode_side.mean()) if decode_side.size else 0.0,
    )


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
            "prefill_scale": round(self.pod.prefill_scale, 3),
            "decode_scale": round(self.pod.decode_scale, 3),
            "error": round(self.error, 4),
            "ttft_error": round(self.ttft_error, 4),
            "tpot_error": round(self.tpot_error, 4),
            "simulations": len(self.tried),
        }


@dataclass(frozen=True, slots=True)
class _Fit:
    total: float
    ttft: float
    tpot: float


_FAILED: Final = _Fit(math.inf, math.inf, math.inf)
REFINE_SPAN: Final = 1.25
"""The fine search of the joint factor looks within x or / this of the coarse pick."""
SPLIT_SPAN: Final = 2.0
"""The prefill and decode factors are each searched within x or / this of the joint one."""
REFINE_STEPS: Final = 6
"""Golden-section steps of each fine search: a bracket of 1.25^2 narrows to about +-1 %. The
error is sharp around the pool's true cost at high load (5 % too fast a pod moves SLO
attainment by 10 points on Mooncake at load 1), so the coarse search alone is not enough."""


def calibrate(
    workload: Workload,
    policy: Router,
    slo: Slo,
    *,
    profiles: Sequence[str] | None = None,
    scale_range: tuple[float, float] = (0.4, 2.5),
    steps: int = 6,
    refine_steps: int = REFINE_STEPS,
    seed: int = 0,
    mode: str = "split",
) -> Calibration:
    """The shipped profile and cost factors whose simulation of ``workload`` on the pool's pod
    count best reproduces the observed TTFT and TPOT distributions (``distribution_error``:
    deciles, not means).

    1. **Coarse**, per profile: one factor on every iteration's cost, a golden-section search on
       log(scale) over ``scale_range`` (``steps`` evaluations after the first two), on the mean
       of the two errors (close to unimodal: a slower pod shifts every latency up). The best
       profile wins.
    2. **Fine** (``refine_steps`` > 0): the same factor again within ``REFINE_SPAN`` of it.
    3. ``mode="split"``: the decode factor alone against the TPOT error, then the prefill
       factor alone against the TTFT error, then the decode factor again (the prefill factor
       moves TPOT too: a step that carries a prefill chunk slows every decode in it), each
       within ``SPLIT_SPAN`` of the joint factor. A TPOT is mostly decode iterations, a TTFT
       mostly prefill: one factor for both fits neither when the pool's prefill and decode
       speeds are off the profile's by different amounts. Kept only if its mean error is below
       the joint one's. A P/D pool's decode pods run no prefill chunk, so its prefill factor
       does not move TPOT and the decode factor is not searched again (10 simulations fewer:
       on a P/D Azure code window the third pass moved it from 0.9925 to 0.9947).

    ``policy`` should route as the pool did while the samples were taken: the latencies depend
    on the routing, and a calibration under another router folds the difference into the cost
    factors. ``Calibration.ttft_error`` and ``tpot_error`` report the fit per target."""
    if mode not in ("joint", "split"):
        raise ValueError("mode is 'joint' or 'split'")
    pods = max(1, len(workload.pods))
    tried: list[dict[str, float | str]] = []
    seen: dict[tuple[str, float, float], _Fit] = {}

    def fit(pod: PodModel) -> _Fit:
        key = (pod.profile, round(pod.prefill_scale, 6), round(pod.decode_scale, 6))
        if key in seen:
            return seen[key]
        try:
            run = simulate(
                workload.trace, pods, pod, policy, slo, seed, prefill_pods=workload.prefill_pods
            )
        except (RuntimeError, MemoryError):
            # The profile's KV cache cannot hold the workload's longest requests.
            result = _FAILED
        else:
            e_ttft = distribution_error(run.ttft_ms, workload.observed_ttft_ms)
            e_tpot = distribution_error(run.tpot_ms, workload.observed_tpot_ms)
            both = [e for e in (e_ttft, e_tpot) if math.isfinite(e)]
            result = _Fit(float(np.mean(both)) if both else math.inf, e_ttft, e_tpot)
        seen[key] = result
        tried.append(
            {
                "profile": pod.profile,
                "prefill_scale": round(pod.prefill_scale, 4),
                "decode_scale": round(pod.decode_scale, 4),
                "error": result.total,
                "ttft_error": result.ttft,
                "tpot_error": result.tpot,
            }
        )
        return result

    def joint(profile: str) -> Callable[[float], _Fit]:
        return lambda x: fit(PodModel(profile, math.exp(x), math.exp(x)))

    best: tuple[str, float, _Fit] | None = None
    lo, hi = math.log(scale_range[0]), math.log(scale_range[1])
    for profile in profiles or available_profiles():
        x, f = _golden(joint(profile), lo, hi, steps, _total)
        if best is None or f.total < best[2].total:
            best = (profile, x, f)
    assert best is not None
    profile, x, f = best
    span = math.log(REFINE_SPAN)
    if refine_steps > 0 and math.isfinite(f.total):
        x, f = min(
            [(x, f), _golden(joint(profile), x - span, x + span, refine_steps, _total)],
            key=lambda p: p[1].total,
        )
    pod = PodModel(profile, math.exp(x), math.exp(x))
    chosen = Calibration(pod, f.total, f.ttft, f.tpot)
    if mode == "split" and math.isfinite(f.total):
        passes: tuple[tuple[str, Callable[[_Fit], float]], ...] = (
            ("decode_scale", _tpot),
            ("prefill_scale", _ttft),
        )
        if not workload.prefill_pods:
            passes += (("decode_scale", _tpot),)
        for part, objective in passes:
            at = math.log(getattr(pod, part))

            def one(x: float, part: str = part, pod: PodModel = pod) -> _Fit:
                return fit(_with_factor(pod, part, math.exp(x)))

            wide = math.log(SPLIT_SPAN)
            # Two more steps than the fine search: a wider bracket, the same resolution.
            x_part, _ = _golden(one, at - wide, at + wide, refine_steps + 2, objective)
            pod = _with_factor(pod, part, math.exp(x_part))
        g = fit(pod)
        if g.total < chosen.error:
            chosen = Calibration(pod, g.total, g.ttft, g.tpot)
    return replace(chosen, tried=tried)


def _with_factor(pod: PodModel, part: str, value: float) -> PodModel:
    if part == "decode_scale":
        return replace(pod, decode_scale=value)
    return replace(pod, prefill_scale=value)


def _total(f: _Fit) -> float:
    return f.total


def _ttft(f: _Fit) -> float:
    return f.ttft


def _tpot(f: _Fit) -> float:
    return f.tpot


_PHI: Final = (math.sqrt(5) - 1) / 2


def _golden(
    f: Callable[[float], _Fit],
    lo: float,
    hi: float,
    steps: int,
    objective: Callable[[_Fit], float],
) -> tuple[float, _Fit]:
    """Golden-section minimum of ``objective(f(x))`` on [lo, hi]: the best point evaluated."""
    a, b = lo, hi
    c, d = b - _PHI * (b - a), a + _PHI * (b - a)
    fc, fd = f(c), f(d)
    seen = [(c, fc), (d, fd)]
    for _ in range(steps):
        if objective(fc) <= objective(fd):
            b, d, fd = d, c, fc
            c = b - _PHI * (b - a)
            fc = f(c)
            seen.append((c, fc))
        else:
            a, c, fc = c, d, fd
            d = a + _PHI * (b - a)
            fd = f(d)
            seen.append((d, fd))
    return min(seen, key=lambda p: objective(p[1]))


# --- desired replicas -----------------------------------------------------------------------


PLATEAU_TOLERANCE: Final = 0.01
"""When no pod count reaches the target, how close to the most pods' attainment is enough."""


@dataclass(frozen=True)
class Desired:
    replicas: int
    met: bool
    """False: even ``hi`` pods miss the target; ``replicas`` is then the fewest pods within
    the plateau (``PLATEAU_TOLERANCE`` by default) of what ``hi`` pods attain (requests whose
    prompt alone outlasts the TTFT SLO miss on any number of pods: more pods than the plateau
    buy nothing). True: the target is reached, or lies within that plateau."""
    attainment: float  # at ``replicas`` pods
    evaluated: dict[int, float]  # pod count -> simulated attainment
    prefill_replicas: int | None = None
    """A P/D pool's answer (``desired_split``): how many of ``replicas`` are prefill pods, the
    rest decode pods. None for an aggregated pool."""
    split_evaluated: dict[tuple[int, int], float] = field(default_factory=dict)
    """A P/D pool's simulations: (prefill, decode) pods -> simulated SLO attainment."""

    @property
    def decode_replicas(self) -> int | None:
        return None if self.prefill_replicas is None else self.replicas - self.prefill_replicas

    @property
    def simulations(self) -> int:
        return len(self.evaluated) + len(self.split_evaluated)


def smallest_meeting(
    attainment: Callable[[int], float],
    target: float,
    lo: int,
    hi: int,
    plateau: float = PLATEAU_TOLERANCE,
    start: int | None = None,
) -> Desired:
    """The smallest pod count in [lo, hi] whose attainment reaches ``target``, by bisection;
    never more than the start of the plateau: the fewest pods within ``plateau`` of what
    ``hi`` pods attain (``Desired.met`` says whether ``hi`` pods reach the target at all).

    With ``start`` (the pool's pod count now) the search begins there: if ``start`` pods
    reach the threshold it bisects below them, else it tries counts above at doubling
    distances (``start`` + 1, + 2, + 4, ...) until one does and bisects the last gap. A replay
    routed by llm-d's load+prefix scorers can attain less with many more pods than with the
    right number (its rebuilt prefixes pile onto few pods): from [1, 64] the bisection tried 32
    and 48, both short, and answered 55 where 12 met the target (docs/capacity.md).

    The plateau bounds the answer even when the target is reachable: where the target sits
    within ``plateau`` of the most pods' attainment, the counts between the plateau's start
    and the one that reaches it differ by the replay's noise, not by what more pods buy. (On
    a Mooncake ramp with a 0.70 target, 7 to 11 pods replayed 0.691 and 12 pods 0.701: the
    answer was 12 pods, which the scale-down stabilisation then held for six minutes.)

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
    target = min(target, at(hi) - plateau)
    a, b = lo, hi  # invariant: at(b) meets the target; every count below a misses it
    if start is not None:
        s = min(max(start, lo), hi)
        if at(s) >= target:
            b = s
        else:
            step, a = 1, s + 1
            while at(min(s + step, hi)) < target:  # hi meets it: the loop ends there
                a, step = s + step + 1, step * 2
            b = min(s + step, hi)
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
    score_last_s: float | None = None,
) -> Desired:
    """The smallest pod count at which ``workload`` (the pool's recent traffic at its own rate)
    on the calibrated ``pod`` keeps SLO attainment at ``target`` (with ``score_last_s``, the
    attainment of the requests of the replay's last that many seconds).

    A pod count at which the simulated pods break down (a request near the KV cache's size
    that preemption cannot make room for among the others) counts as attaining nothing: so
    few pods do not hold the traffic. At ``max_replicas`` the error propagates: then no count
    serves it and there is no answer."""

    trace = workload.trace
    score_from = trace.duration_s - score_last_s if score_last_s else None
    if workload.prefill_pods:
        return desired_split(
            workload,
            pod,
            policy,
            slo,
            target,
            max_replicas=max_replicas,
            min_replicas=min_replicas,
            plateau=plateau,
            seed=seed,
            score_last_s=score_last_s,
        )

    def attainment(n: int) -> float:
        try:
            return simulate(trace, n, pod, policy, slo, seed, score_from).slo_attainment
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
        start=len(workload.pods) or None,
    )


def desired_split(
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
    score_last_s: float | None = None,
) -> Desired:
    """A P/D pool's desired replicas: how many prefill and how many decode pods keep
    ``workload`` at ``target``, each role between ``min_replicas`` and ``max_replicas``.

    Three searches of ``smallest_meeting``, each from the pool's present count of its role:

    1. the prefill pods against the share of first tokens within the TTFT SLO, at the present
       decode pods: the TTFT is mostly the prefill pods' queue, and the joint attainment is
       capped by the decode side whatever the prefill count (too few decode pods would leave
       nothing for this search to find);
    2. the decode pods against the share the decode side served in time
       (``RunResult.decode_attainment``), at those prefill pods: a miss counts against them
       unless the prefill pod handed the request on already past the TTFT SLO. Against the
       joint attainment this search read the prefill side's misses: where the prefill pods
       could not reach the target (their bound, or prompts that alone outlast the TTFT SLO)
       the decode counts' attainments sat within the replay's noise of one another and the
       plateau took 10 or 12 decode pods where 2 served. Against the TPOT's share alone it
       missed what the decode pods do to the first token (it is theirs, after the KV's
       transfer and a slot in their cache): one decode pod for Mooncake's long prompts
       (docs/capacity.md, "A P/D pool in the loop");
    3. the prefill pods again against the SLO attainment (both SLOs), at those decode pods: a
       request meeting both needs both, so the first count may be short (or, with the decode
       pods' share of the misses gone, more than enough).

    Not the fewest pods of any split (that would be a search over every split of every
    count): the coordinate search the roles' separate scaling asks for, each role's count the
    fewest given the other's. A split at which the simulated pods break down attains nothing,
    as in ``desired_replicas``; at the top of both ranges the error propagates."""
    trace = workload.trace
    score_from = trace.duration_s - score_last_s if score_last_s else None
    lo, hi = min(max(min_replicas, 1), max_replicas), max(max_replicas, 1)
    runs: dict[tuple[int, int], RunResult | None] = {}

    def run(p: int, d: int) -> RunResult | None:
        if (p, d) not in runs:
            try:
                runs[p, d] = simulate(trace, p + d, pod, policy, slo, seed, score_from, p)
            except (RuntimeError, MemoryError):
                if p >= hi and d >= hi:
                    raise
                runs[p, d] = None
        return runs[p, d]

    def first_tokens(d: int) -> Callable[[int], float]:
        def at(p: int) -> float:
            r = run(p, d)
            return r.ttft_attainment if r is not None else 0.0

        return at

    def decode_side(p: int) -> Callable[[int], float]:
        def at(d: int) -> float:
            r = run(p, d)
            return r.decode_attainment if r is not None else 0.0

        return at

    def both(d: int) -> Callable[[int], float]:
        def at(p: int) -> float:
            r = run(p, d)
            return r.slo_attainment if r is not None else 0.0

        return at

    p0, d0 = workload.prefill_pods, workload.decode_pods
    prefill = smallest_meeting(first_tokens(d0), target, lo, hi, plateau, start=p0).replicas
    decode = smallest_meeting(decode_side(prefill), target, lo, hi, plateau, start=d0)
    last = smallest_meeting(both(decode.replicas), target, lo, hi, plateau, start=prefill)
    p, d = last.replicas, decode.replicas
    return Desired(
        p + d,
        decode.met and last.met,
        last.attainment,
        {},
        prefill_replicas=p,
        split_evaluated={k: (r.slo_attainment if r is not None else 0.0) for k, r in runs.items()},
    )


MIN_REQUESTS: Final = 20
"""Fewer requests than this in the samples: no estimate (a replay of a handful of requests
says nothing about the pod count)."""
SETTLE_QUANTILE: Final = 0.95
"""``current_load`` counts arrivals up to this quantile of the window's TTFTs before its end:
later ones have mostly not reached their first token, so have not been sampled yet."""


def current_load(rows: Sequence[SampleRow], window_s: float) -> float:
    """How many times the samples' own request rate the arrivals of their last ``window_s``
    seconds ran at: the factor that replays the window at the pool's *current* rate
    (``Trace.scaled``). 1.0 when the last ``window_s`` hold fewer than ``MIN_REQUESTS``
    arrivals, or the samples span no more than that.

    Arrivals are read from the TTFT samples (a sample's time less its TTFT), so a request is
    seen only once it has its first token: the count stops at the window's end less the
    ``SETTLE_QUANTILE`` TTFT (the newest sample's time is the end), where most arrivals
    before it have been sampled. The same cut-off applies to the whole window's rate."""
    if not window_s > 0:
        raise ValueError("window_s must be > 0")
    settled = _arrivals(rows)
    if settled is None:
        return 1.0
    arrival, start, end, _ = settled
    if end - start <= window_s:
        return 1.0
    recent = int((arrival > end - window_s).sum())
    if recent < MIN_REQUESTS:
        return 1.0
    return (recent / window_s) / (arrival.size / (end - start))


FORECAST_BIN_S: Final = 10.0
"""``forecast_load`` counts arrivals in bins this long and fits its line through the counts."""
FORECAST_SIGNIFICANCE: Final = 2.0
"""``forecast_load`` uses the line's slope only beyond this many standard errors from 0:
bursty arrivals make a 2-minute window's slope noisy, and a scale-down stabilisation keeps
every upward swing of the answer for minutes."""
FORECAST_CLAMP: Final = (0.5, 2.0)
"""The forecast's factor on the window's mean rate is kept within these bounds."""


def _arrivals(
    rows: Sequence[SampleRow],
) -> tuple[npt.NDArray[np.float64], float, float, float] | None:
    """The settled arrivals of the TTFT samples (``current_load``'s reading), their window's
    start and end, and the newest sample's time; None with fewer than ``MIN_REQUESTS``."""
    ttft = [r for r in rows if r.target == "ttft"]
    if len(ttft) < MIN_REQUESTS:
        return None
    observed = np.array([r.time_s for r in ttft])
    latency_s = np.array([r.latency_ms for r in ttft]) / 1000.0
    arrival = observed - latency_s
    newest = float(observed.max())
    end = newest - float(np.quantile(latency_s, SETTLE_QUANTILE))
    return arrival[arrival <= end], float(arrival.min()), end, newest


def _settled_rate(rows: Sequence[SampleRow]) -> float:
    """Settled arrivals a second over ``rows``' window (``_arrivals``); 0 with too few."""
    settled = _arrivals(rows)
    if settled is None:
        return 0.0
    arrival, start, end, _ = settled
    return arrival.size / max(end - start, FORECAST_BIN_S)


def forecast_load(rows: Sequence[SampleRow], lead_s: float) -> float:
    """How many times the samples' mean request rate the pool is forecast to run at ``lead_s``
    after the newest sample: the factor that sizes the pods for when the ones asked for now
    will be ready (a model load takes 60-120 s), where the mean rate lags a ramp by half the
    window as well.

    A least-squares line through the settled arrivals' counts (``current_load``'s reading) in
    ``FORECAST_BIN_S`` bins, its slope used only beyond ``FORECAST_SIGNIFICANCE`` standard
    errors, read at the newest sample's time plus ``lead_s`` over the bins' mean count and
    clamped to ``FORECAST_CLAMP``. 1.0 with too few arrivals or bins, or no clear trend."""
    if lead_s < 0:
        raise ValueError("lead_s must be >= 0")
    settled = _arrivals(rows)
    if settled is None or lead_s == 0:
        return 1.0
    arrival, start, end, newest = settled
    bins = int((end - start) // FORECAST_BIN_S)
    if bins < 4 or arrival.size < MIN_REQUESTS:
        return 1.0
    # Whole bins back from the settled end; the partial one at the start is left out.
    edges = end - FORECAST_BIN_S * np.arange(bins, -1, -1, dtype=np.float64)
    counts, _ = np.histogram(arrival, bins=edges)
    mids = (edges[:-1] + edges[1:]) / 2.0
    mean = float(counts.mean())
    if mean <= 0:
        return 1.0
    # Least squares about the bins' mean time: the service's times are epoch seconds, where an
    # uncentred fit (np.polyfit's) is numerically singular. The standard error as polyfit's.
    x = mids - float(mids.mean())
    y = counts.astype(np.float64)
    sxx = float(x @ x)
    slope = float(x @ (y - mean)) / sxx
    residual = y - mean - slope * x
    se = float(np.sqrt(float(residual @ residual) / (bins - 2) / sxx))
    if not abs(slope) > FORECAST_SIGNIFICANCE * se:
        return 1.0
    factor = 1.0 + slope * (newest + lead_s - float(mids.mean())) / mean
    return float(np.clip(factor, *FORECAST_CLAMP))


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
    load: float = 1.0
    """The factor on ``workload``'s rate at which the bisection replayed it (``current_load``,
    or ``forecast_load`` over the rows the line was read from, converted to ``workload``'s own
    rate)."""
    replayed: Trace | None = None
    """What the bisection replayed: ``workload.trace`` at the current rate (``load``)."""
    more_simulations: int = 0
    """The other replay's bisection, where ``estimate_replicas`` ran two (``newest``)."""

    @property
    def simulations(self) -> int:
        own = (len(self.calibration.tried) if self.calibrated else 0) + self.desired.simulations
        return own + self.more_simulations


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
    rate_window_s: float | None = None,
    lead_s: float | None = None,
    trend_rows: Sequence[SampleRow] | None = None,
    score_last_s: float | None = None,
    profiles: Sequence[str] | None = None,
    newest: Sequence[SampleRow] | None = None,
) -> ReplicaEstimate | None:
    """Desired replicas from a pool's samples: rebuild the requests (``build_workload``),
    calibrate the pod unless ``calibrated`` is given, and bisect on the pod count over
    replays routed by the simulator policy ``router``. None when the samples hold fewer than
    ``MIN_REQUESTS`` requests. The one path from samples to a pod count: the service's
    periodic job (``backend/capacity/desired.py``) and the simulator's autoscaler
    (``backend/sim/autoscale.py``) both call it.

    With ``rate_window_s`` the bisection replays the requests at the rate of the window's last
    ``rate_window_s`` seconds (``current_load``), not at the window's mean: a burst or a ramp
    is sized at the rate it has reached. The pod is calibrated on the requests as they came
    (their latencies were observed at that rate); ``ReplicaEstimate.load`` is the factor.

    With ``lead_s`` it replays them at the rate forecast ``lead_s`` after the newest sample
    (``forecast_load``, its line read from ``trend_rows``, by default ``rows``: a longer
    history than the replay's tells a trend from a burst): the pods asked for now are ready
    only after their start-up. One of ``rate_window_s`` and ``lead_s`` at most.

    With ``score_last_s`` each replay is scored on the requests of its last that many seconds
    (``desired_replicas``): the window's earlier requests load the pods but do not dilute a
    burst's misses with the calm before it.

    ``profiles``: the shipped profiles the calibration may pick (``calibrate``; default all),
    a pool's declared one (its policy's ``gpu_profile``).

    With ``newest`` (the newest part of ``rows``, for example their last 120 s) those are
    replayed too, on the calibration of ``rows``, the look-ahead's line still read over the
    whole history, and the larger count answers: a burst is a larger share of the newest
    requests than of the whole window, so its misses weigh more there, and where the target is
    out of reach the newest requests' plateau starts at more pods (docs/capacity.md, "The
    newest 120 s replayed too"). ``calibrated`` says whether this call calibrated; the other
    replay's simulations count in ``simulations``."""
    # The two replays differ only in their rows, the pod they are given and the line's rows.
    one = functools.partial(
        _estimate_one,
        slo=slo,
        target=target,
        router=router,
        max_replicas=max_replicas,
        min_replicas=min_replicas,
        calibration_steps=calibration_steps,
        plateau=plateau,
        seed=seed,
        rate_window_s=rate_window_s,
        lead_s=lead_s,
        score_last_s=score_last_s,
        profiles=profiles,
    )
    first = one(rows, calibrated=calibrated, trend_rows=trend_rows)
    if first is None or not newest:
        return first
    trend = rows if trend_rows is None else trend_rows
    short = one(newest, calibrated=first.calibration, trend_rows=trend)
    if short is None:
        return first
    total = first.simulations + short.simulations
    chosen = short if short.desired.replicas > first.desired.replicas else first
    # The pod was calibrated (or given) once, for both replays.
    chosen = replace(chosen, calibrated=first.calibrated)
    return replace(chosen, more_simulations=total - chosen.simulations)


def _estimate_one(
    rows: Sequence[SampleRow],
    slo: Slo,
    target: float,
    *,
    router: str,
    max_replicas: int,
    min_replicas: int,
    calibrated: Calibration | None,
    calibration_steps: int,
    plateau: float,
    seed: int,
    rate_window_s: float | None,
    lead_s: float | None,
    trend_rows: Sequence[SampleRow] | None,
    score_last_s: float | None,
    profiles: Sequence[str] | None,
) -> ReplicaEstimate | None:
    """``estimate_replicas`` over one window of rows."""
    if sum(r.target == "ttft" for r in rows) < MIN_REQUESTS:
        return None
    if rate_window_s and lead_s:
        raise ValueError("rate_window_s and lead_s are two answers to one question: give one")
    observed = build_workload(rows, seed=seed)
    if rate_window_s:
        load = current_load(rows, rate_window_s)
    elif lead_s:
        load = forecast_load(rows if trend_rows is None else trend_rows, lead_s)
        if trend_rows is not None:
            # The factor is over the trend's mean rate; the replay is of ``rows``, whose mean
            # differs (a shorter window's is above a longer one's on a rise): convert, so the
            # replay runs at the forecast rate itself, as where the two are one window.
            trend_rate, replay_rate = _settled_rate(trend_rows), _settled_rate(rows)
            if trend_rate > 0 and replay_rate > 0:
                load *= trend_rate / replay_rate
    else:
        load = 1.0
    workload = replace(observed, trace=observed.trace.scaled(load)) if load != 1.0 else observed
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
            score_last_s=score_last_s,
        )

    if calibrated is not None:
        try:
            desired = bisect(calibrated.pod)
            return ReplicaEstimate(desired, observed, calibrated, False, load, workload.trace)
        except (RuntimeError, MemoryError):
            # The kept pod's KV cache cannot hold a request of this window (one longer than
            # any it was calibrated on): calibrate again, which rules such profiles out.
            pass
    cal = calibrate(observed, router, slo, profiles=profiles, steps=calibration_steps, seed=seed)
    return ReplicaEstimate(bisect(cal.pod), observed, cal, True, load, workload.trace)
