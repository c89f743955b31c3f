"""The discrete-event loop: arrivals, routing, pods' iterations, KV transfers, retraining.

Events are kept in one heap; trace arrivals are merged in from the (sorted) trace rather than
pushed. A pod has at most one live event (the end of its current run of iterations); when an
arrival changes the plan the pod's ``version`` moves on and the stale event is skipped.

The router sees what ``RouterView`` gives it; the simulator keeps its in-flight counts as a
router would: a request counts against a pod from dispatch until it finishes there (a prefill
pod: until the handoff), its uncached prompt tokens until its first token (or handoff).

**Asking a predictor takes time.** A policy that calls a latency predictor decides on the state
it saw at arrival, and the request reaches its pod ``dispatch_delay_ms`` later (by default the
measured latency of that policy's predictor call, ``PREDICTOR_CALL_MS``); requests arriving
meanwhile are decided without seeing it, as with a router that serves requests concurrently.

**The present-state floor.** Every ``floor_every``-th request dispatched after
``floor_warmup_s`` is also run on a noise-free copy of its pod (``Server.clone``) with no later
arrivals, to its first token and its completion. The gap between that outcome and the real one
is what no predictor that knows only the present can remove: later arrivals, preemptions they
cause, step-time noise. ``SimResult.prediction_error`` sets it beside the live error of the
predictions routing used.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from backend.predictor.features import Target
from backend.predictor.knowable import load_deciles
from backend.scheduling.transfer import distance
from backend.scheduling.types import TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.kvcache import blocks
from backend.sim.pool import PodSpec
from backend.sim.routers.base import Route, RoutingPolicy
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.server import (
    STEP_NOISE_SIGMA,
    Done,
    FirstToken,
    Handoff,
    Outcome,
    Request,
    Seq,
    Server,
)
from backend.sim.traces.loader import UNIT_TOKENS, Trace
from backend.sim.view import RouterView, Slo

_STEP: Final = 0
_TRANSFER: Final = 1
_TICK: Final = 2
_DISPATCH: Final = 3
FloatArray = npt.NDArray[np.float64]

PREDICTOR_CALL_MS: Final[dict[str, float]] = {"xgboost": 19.0, "hybrid": 1.15}
"""Latency of one predictor call on the routing path, by predictor kind, from this project's
benchmarks (docs/benchmarks.md, "Prediction latency"): llm-d's prediction server (XGBoost, the
upstream sidecar) answers a 100-row call in about 19 ms p50, Headroom's ``/predict/bulk/strict``
in 1.15 ms p50 (same machine, loopback). Issue 16 quotes about 10 ms and 1.5 ms; the project's
own measurements are used."""


FLOOR_EVERY: Final = 10
"""The floor's sampling wherever it is measured (benchmarks, the demo, the what-if): every 10th
request, after ``SimConfig.floor_warmup_s``."""


@dataclass(frozen=True)
class SimConfig:
    slo: Slo
    seed: int = 0
    scrape_interval_s: float = 0.05
    """How often the router scrapes each pod's gauges (llm-d's 50 ms). 0 is a measurement
    option only: the router reads every pod's present gauges, which no real router can."""
    retrain_interval_s: float = 10.0
    sheddable_fraction: float = 0.0
    """Share of requests with priority -1 (the SLO admitter may shed them); the rest are 0."""
    transfer: TransferConfig = field(default_factory=TransferConfig)
    """The fabric's true costs per topology distance (bytes per token come from the profile)."""
    step_noise: float = STEP_NOISE_SIGMA
    """Log-sd of the multiplicative noise on every iteration's time (0: the profile's exact
    cost). Default: the measured spread of whole-model forward passes (``STEP_NOISE_SIGMA``).
    Seeded from ``seed`` and the pod's index."""
    decode_scale: float = 1.0
    """Multiplies the decode share of every iteration's cost (sensitivity checks)."""
    prefill_scale: float = 1.0
    """Multiplies the prefill share of every iteration's cost (sensitivity checks)."""
    spread_ties: bool = True
    """Spread arrivals over their recorded timestamp tick (``Trace.spread_ties``, seeded)."""
    dispatch_delay_ms: float | None = None
    """Time between a request's arrival and its dispatch. ``None``: the measured latency of the
    policy's predictor call (``PREDICTOR_CALL_MS`` by predictor kind; 0 for a policy that calls
    no predictor); a number: that delay for every request, whatever the policy."""
    floor_every: int = 0
    """Measure the present-state floor on every n-th request (0: off; ``FLOOR_EVERY``)."""
    floor_warmup_s: float = 60.0
    """Simulated seconds before the floor is sampled (the predictors' first models and
    retrains; the cache warms up)."""


@dataclass
class SimResult:
    """Per-request outcomes (seconds; NaN where it did not happen) and run facts."""

    arrival: FloatArray
    first_token: FloatArray
    done: FloatArray
    shed: npt.NDArray[np.bool_]
    prompt: npt.NDArray[np.int64]
    output: npt.NDArray[np.int64]
    hit_tokens: npt.NDArray[np.int64]
    pod: npt.NDArray[np.int64]
    prefill_pod: npt.NDArray[np.int64]
    transfer_ms: FloatArray
    handoff: FloatArray
    """When a P/D request's prefill pod handed it on (its KV ready to transfer); NaN on a pod
    serving both phases."""
    predicted_ttft_ms: FloatArray
    predicted_tpot_ms: FloatArray
    predicted_tpot_p90_ms: FloatArray
    """The calibrated TPOT p90 routing had for the chosen pod (NaN: none)."""
    floor_ttft_ms: FloatArray
    """The present-state floor's TTFT (from arrival) where sampled, else NaN."""
    floor_tpot_ms: FloatArray
    dispatch_load: npt.NDArray[np.int64]
    """Requests on the chosen pod (running + waiting) when this one reached it; -1 if never."""
    pods: list[dict[str, Any]]
    policy: dict[str, Any]
    wall_s: float
    events: int

    @property
    def ttft_ms(self) -> FloatArray:
        return (self.first_token - self.arrival) * 1000.0

    @property
    def e2e_ms(self) -> FloatArray:
        return (self.done - self.arrival) * 1000.0

    @property
    def tpot_ms(self) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = (self.done - self.first_token) * 1000.0 / (self.output - 1)
        return np.where(self.output > 1, tpot, np.nan)

    def prediction_error(self, deciles: int = 10) -> dict[str, Any]:
        """The present-state floor beside the live error of the predictions routing used.

        Relative errors ``(estimate - actual) / actual`` per target: ``floor`` on the sampled
        requests, ``live`` on every request with a prediction and, for a like-for-like
        comparison, on the sampled ones (``live_sampled``). Per load decile (requests on the
        chosen pod at dispatch, equal-sized groups by rank): MAPE, median bias and p90 of the
        absolute error, in %."""
        actual = {"ttft": self.ttft_ms, "tpot": self.tpot_ms}
        estimates = {
            "floor": {"ttft": self.floor_ttft_ms, "tpot": self.floor_tpot_ms},
            "live": {"ttft": self.predicted_ttft_ms, "tpot": self.predicted_tpot_ms},
        }
        sampled = np.isfinite(self.floor_ttft_ms)
        out: dict[str, Any] = {"sampled_requests": int(sampled.sum())}
        for target, real in actual.items():
            row: dict[str, Any] = {}
            for name, est in estimates.items():
                rel = _relative_error(est[target], real)
                row[name] = _error_stats(rel, self.dispatch_load, deciles)
                if name == "live":
                    only = np.where(sampled, rel, np.nan)
                    row["live_sampled"] = _error_stats(only, self.dispatch_load, deciles)
            out[target] = row
        out["tpot_p90_coverage"] = _coverage_stats(
            self.predicted_tpot_p90_ms, self.tpot_ms, self.dispatch_load, deciles
        )
        return out


def _coverage_stats(
    upper: FloatArray, actual: FloatArray, load: npt.NDArray[np.int64], deciles: int
) -> dict[str, Any]:
    """Share of actuals at or under a predicted upper quantile, overall and per load decile
    (target for a p90: 85-95 % in every decile)."""
    ok = np.isfinite(upper) & (upper > 0) & np.isfinite(actual) & (actual > 0)
    under, lo = actual[ok] <= upper[ok], load[ok]
    if under.size < deciles:
        return {"n": int(under.size)}
    groups = load_deciles(lo, deciles)
    return {
        "n": int(under.size),
        "share_pct": round(100.0 * float(under.mean()), 1),
        "by_load_decile_pct": [round(100.0 * float(under[g].mean()), 1) for g in groups],
    }


def _relative_error(estimate: FloatArray, actual: FloatArray) -> FloatArray:
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = (estimate - actual) / actual
    return np.where(np.isfinite(rel) & (actual > 0), rel, np.nan)


def _error_stats(rel: FloatArray, load: npt.NDArray[np.int64], deciles: int) -> dict[str, Any]:
    ok = np.isfinite(rel)
    r, lo = rel[ok], load[ok]

    def stats(x: FloatArray) -> dict[str, float | int]:
        if not len(x):
            return {"n": 0}
        return {
            "n": len(x),
            "mape_pct": round(100.0 * float(np.mean(np.abs(x))), 2),
            "median_bias_pct": round(100.0 * float(np.median(x)), 2),
            "p90_abs_pct": round(100.0 * float(np.quantile(np.abs(x), 0.9)), 2),
        }

    groups = load_deciles(lo, deciles) if len(r) >= deciles else []
    return {
        **stats(r),
        "by_load_decile": [
            {"load_min": int(lo[g].min()), "load_max": int(lo[g].max()), **stats(r[g])}
            for g in groups
        ],
    }


def predictor_call_ms(policy: RoutingPolicy) -> float:
    """The measured latency of the predictor call ``policy`` makes per request (0 if none)."""
    if isinstance(policy, PredictedLatency):
        return PREDICTOR_CALL_MS[policy.config.kind]
    return 0.0


def max_context(pods: Sequence[PodSpec]) -> int:
    """Longest prompt + output every pod can hold (1 % watermark and a block of slack)."""
    blocks_min = min(load_profile(p.profile).kv_capacity_tokens // 16 for p in pods)
    return int((blocks_min - blocks_min // 100 - 2) * 16)


class Simulation:
    def __init__(
        self,
        trace: Trace,
        pods: Sequence[PodSpec],
        policy: RoutingPolicy,
        config: SimConfig,
    ) -> None:
        limit = max_context(pods)
        if int((trace.input_tokens + trace.output_tokens).max(initial=0)) > limit:
            trace = trace.clipped(limit)
        if config.spread_ties:
            trace = trace.spread_ties(config.seed)
        self.trace = trace
        self.config = config
        self.policy = policy
        self.servers = [
            Server(
                i,
                spec.name,
                load_profile(spec.profile),
                role=spec.role,
                topology=spec.topology,
                max_context=limit,
                step_noise=config.step_noise,
                seed=config.seed,
                decode_scale=config.decode_scale,
                prefill_scale=config.prefill_scale,
            )
            for i, spec in enumerate(pods)
        ]
        self.rng = random.Random(config.seed)
        self.view = RouterView(
            self.servers,
            config.slo,
            random.Random(self.rng.getrandbits(64)),
            config.transfer,
            scrape_interval_s=config.scrape_interval_s,
        )
        if self.view.prefill_pods and not self.view.decode_pods:
            raise ValueError("a P/D pool needs decode pods too")
        policy.bind(self.view)
        delay = config.dispatch_delay_ms
        if delay is None:
            delay = predictor_call_ms(policy)
        if delay < 0:
            raise ValueError("dispatch_delay_ms must be >= 0")
        self.dispatch_delay_s = delay / 1000.0
        if config.floor_every < 0:
            raise ValueError("floor_every must be >= 0")
        units = trace.all_units()
        priorities = np.where(
            np.random.default_rng(config.seed).random(len(trace)) < config.sheddable_fraction,
            -1,
            0,
        ).tolist()
        self.requests = [
            Request(i, a, p, o, u, pr)
            for i, (a, p, o, u, pr) in enumerate(
                zip(
                    trace.arrival_s.tolist(),
                    trace.input_tokens.tolist(),
                    trace.output_tokens.tolist(),
                    units,
                    priorities,
                    strict=True,
                )
            )
        ]
        n = len(trace)
        self.routes: list[Route | None] = [None] * n
        self._first = np.full(n, np.nan)
        self._done = np.full(n, np.nan)
        self._shed = np.zeros(n, dtype=np.bool_)
        self._hit = np.full(n, -1, dtype=np.int64)
        self._transfer = np.full(n, np.nan)
        self._handoff = np.full(n, np.nan)
        self._floor_ttft = np.full(n, np.nan)
        self._floor_tpot = np.full(n, np.nan)
        self._load = np.full(n, -1, dtype=np.int64)
        self._dispatched = 0  # requests that reached a pod, for the floor's sampling
        self._heap: list[tuple[float, int, int, int, Any]] = []
        self._counter = 0
        self._inflight = 0
        self._arrivals: list[float] = trace.arrival_s.tolist()
        self._next_arrival = 0  # index of the next trace arrival
        self._events = 0
        self._started = False

    def _push(self, t: float, kind: int, a: int, payload: Any) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (t, self._counter, kind, a, payload))

    def _schedule_pod(self, server: Server, t: float | None) -> None:
        if t is not None:
            server.version += 1
            self._push(t, _STEP, server.index, server.version)

    def run(self, progress: Callable[[int], None] | None = None) -> SimResult:
        started = time.perf_counter()
        n = len(self.requests)
        self.run_until(math.inf, progress)
        if progress is not None and n % 256:
            progress(n % 256)
        return self._result(time.perf_counter() - started, self._events)

    def run_until(self, until: float, progress: Callable[[int], None] | None = None) -> bool:
        """Process every arrival and event at or before simulated time ``until`` and stop there;
        the next call carries on where this one stopped, so running in slices gives exactly the
        results of one ``run()``. Returns whether anything is left (arrivals or events)."""
        arrivals = self._arrivals
        n, i, events = len(arrivals), self._next_arrival, self._events
        heap = self._heap
        if not self._started:
            self._started = True
            if self.policy.learns:
                self._push(self.config.retrain_interval_s, _TICK, 0, None)
        outcomes: list[Outcome] = []
        try:
            while i < n or heap:
                if i < n and (not heap or arrivals[i] < heap[0][0]):
                    if arrivals[i] > until:
                        break
                    self._arrive(self.requests[i], arrivals[i])
                    i += 1
                    if progress is not None and i % 256 == 0:
                        progress(256)
                    continue
                if heap[0][0] > until:
                    break
                t, _, kind, a, payload = heapq.heappop(heap)
                events += 1
                if kind == _STEP:
                    server = self.servers[a]
                    if payload != server.version:
                        continue
                    outcomes.clear()
                    nxt = server.advance(t, outcomes)
                    self._schedule_pod(server, nxt)
                    for o in outcomes:
                        self._outcome(o, server)
                elif kind == _DISPATCH:
                    self._dispatch(payload[0], payload[1], t)
                elif kind == _TRANSFER:
                    seq = Seq(payload)
                    seq.remote = True
                    server = self.servers[a]
                    self._schedule_pod(server, server.enqueue(seq, t))
                else:
                    self.view.now = t
                    self.policy.tick(t)
                    for server in self.servers:
                        server.forget_before(t - 2 * self.config.scrape_interval_s)
                    # In-flight requests with no event left (none admitted by any pod) can
                    # never finish: ticking on for them would loop forever, so end as a run
                    # without ticks does (they count as unfinished).
                    if i < n or (self._inflight and heap):
                        self._push(t + self.config.retrain_interval_s, _TICK, 0, None)
        finally:  # kept if a policy raised while routing: the next call retries that arrival
            self._next_arrival, self._events = i, events
        return i < n or bool(heap)

    def _arrive(self, req: Request, now: float) -> None:
        self.view.now = now
        route = self.policy.route(req)
        if route.shed:
            self._shed[req.rid] = True
            return
        self.routes[req.rid] = route
        self._inflight += 1
        if self.dispatch_delay_s > 0:
            # The decision waited for the predictor's answer; the request leaves the router then.
            self._push(now + self.dispatch_delay_s, _DISPATCH, 0, (req, route))
        else:
            self._dispatch(req, route, now)

    def _dispatch(self, req: Request, route: Route, now: float) -> None:
        v = self.view
        v.now = now
        self.policy.on_dispatch(req, route, now)
        first = route.prefill if route.prefill is not None else route.pod
        v.dispatched[first] += 1
        v.prefill_inflight[first] += route.uncached
        v.prefill_since[first][req.rid] = now
        if route.prefill is not None:
            v.dispatched[route.pod] += 1
        server = self.servers[first]
        seq = Seq(req, prefill_only=route.prefill is not None)
        self._load[req.rid] = len(server.running) + len(server.waiting)
        self._dispatched += 1
        cfg = self.config
        if (
            cfg.floor_every
            and route.prefill is None
            and now >= cfg.floor_warmup_s
            and self._dispatched % cfg.floor_every == 0
        ):
            self._measure_floor(server, seq, now)
        self._schedule_pod(server, server.enqueue(seq, now))

    def floor_ms(self, target: Target, rid: int) -> float:
        """Request ``rid``'s present-state floor for ``target`` (measured at its dispatch); NaN
        when it was not sampled (``SimConfig.floor_every``) or has not been dispatched yet."""
        return float((self._floor_ttft if target == "ttft" else self._floor_tpot)[rid])

    def _measure_floor(self, server: Server, seq: Seq, now: float) -> None:
        """Run a noise-free copy of the pod with this request and no later arrivals to its
        first token and its completion (P/D routes are not sampled: the outcome would also
        depend on the decode pod and the transfer)."""
        req = seq.req
        ttft_s, tpot_ms = server.lookahead(
            seq, now, decode_tokens=max(req.output - 1, 0), horizon_s=math.inf
        )
        self._floor_ttft[req.rid] = (now - req.arrival + ttft_s) * 1000.0
        self._floor_tpot[req.rid] = tpot_ms

    def _outcome(self, o: Outcome, server: Server) -> None:
        v = self.view
        req = o.seq.req
        route = self.routes[req.rid]
        assert route is not None
        v.now = o.time
        if isinstance(o, FirstToken):
            self._first[req.rid] = o.time
            if route.prefill is None:
                v.prefill_inflight[route.pod] -= route.uncached
                v.prefill_since[route.pod].pop(req.rid, None)
                v.first_token_at[route.pod] = o.time
                self._hit[req.rid] = o.seq.hit_tokens
            v.decode_inflight[route.pod] += req.prompt
            self.policy.on_first_token(req, route, o.time, (o.time - req.arrival) * 1000.0)
        elif isinstance(o, Handoff):
            v.dispatched[server.index] -= 1
            v.prefill_inflight[server.index] -= route.uncached
            v.prefill_since[server.index].pop(req.rid, None)
            v.first_token_at[server.index] = o.time
            self._hit[req.rid] = o.seq.hit_tokens
            self._handoff[req.rid] = o.time
            self.policy.on_handoff(req, route, o.time, (o.time - req.arrival) * 1000.0)
            self._start_transfer(req, server, self.servers[route.pod], o.time)
        elif isinstance(o, Done):
            self._done[req.rid] = o.time
            self._inflight -= 1
            v.dispatched[server.index] -= 1
            v.decode_inflight[server.index] -= req.prompt
            tpot = None
            if req.output > 1:
                tpot = (o.time - self._first[req.rid]) * 1000.0 / (req.output - 1)
            self.policy.on_done(req, route, o.time, tpot)

    def _start_transfer(self, req: Request, src: Server, dst: Server, now: float) -> None:
        """The decode pod pulls the KV blocks its own prefix cache lacks."""
        run = dst.prefix_hit_units(req.units)
        tokens = req.prompt - min(run * UNIT_TOKENS, req.prompt)
        kv_bytes = tokens * src.profile.kv_bytes_per_token
        fabric = self.config.transfer
        dist = distance(src.topology, dst.topology, fabric.unknown_distance)
        ms = fabric.latency_ms(dist) + kv_bytes / (fabric.bandwidth_gbps(dist) * 1e6)
        self._transfer[req.rid] = ms
        self.policy.on_transfer(kv_bytes, dist, ms)
        self._push(now + ms / 1000.0, _TRANSFER, dst.index, req)

    def _result(self, wall_s: float, events: int) -> SimResult:
        nan = math.nan
        routes = self.routes
        return SimResult(
            arrival=self.trace.arrival_s.copy(),
            first_token=self._first,
            done=self._done,
            shed=self._shed,
            prompt=self.trace.input_tokens.copy(),
            output=self.trace.output_tokens.copy(),
            hit_tokens=self._hit,
            pod=np.asarray([-1 if r is None else r.pod for r in routes], dtype=np.int64),
            prefill_pod=np.asarray(
                [-1 if r is None or r.prefill is None else r.prefill for r in routes],
                dtype=np.int64,
            ),
            transfer_ms=self._transfer,
            handoff=self._handoff,
            predicted_ttft_ms=np.asarray([nan if r is None else r.ttft_ms for r in routes]),
            predicted_tpot_ms=np.asarray([nan if r is None else r.tpot_ms for r in routes]),
            predicted_tpot_p90_ms=np.asarray([nan if r is None else r.tpot_p90_ms for r in routes]),
            floor_ttft_ms=self._floor_ttft,
            floor_tpot_ms=self._floor_tpot,
            dispatch_load=self._load,
            pods=[
                {
                    "name": s.name,
                    "profile": s.profile.name,
                    "role": s.role or "both",
                    "iterations": s.iterations,
                    "preemptions": s.preemptions,
                    "kv_capacity_blocks": s.kv.capacity,
                }
                for s in self.servers
            ],
            policy={
                "name": self.policy.name,
                "reproduces": self.policy.reproduces,
                **self.policy.summary(),
            },
            wall_s=wall_s,
            events=events,
        )


__all__ = [
    "PREDICTOR_CALL_MS",
    "SimConfig",
    "SimResult",
    "Simulation",
    "blocks",
    "max_context",
    "predictor_call_ms",
]
