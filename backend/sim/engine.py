"""The discrete-event loop: arrivals, routing, pods' iterations, KV transfers, retraining.

Events are kept in one heap; trace arrivals are merged in from the (sorted) trace rather than
pushed. A pod has at most one live event (the end of its current run of iterations); when an
arrival changes the plan the pod's ``version`` moves on and the stale event is skipped.

The router sees what ``RouterView`` gives it; the simulator keeps its in-flight counts as a
router would: a request counts against a pod from dispatch until it finishes there (a prefill
pod: until the handoff), its uncached prompt tokens until its first token (or handoff).
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

from backend.scheduling.transfer import distance
from backend.scheduling.types import TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.kvcache import blocks
from backend.sim.pool import PodSpec
from backend.sim.routers.base import Route, RoutingPolicy
from backend.sim.server import Done, FirstToken, Handoff, Outcome, Request, Seq, Server
from backend.sim.traces.loader import UNIT_TOKENS, Trace
from backend.sim.view import RouterView, Slo

_STEP: Final = 0
_TRANSFER: Final = 1
_TICK: Final = 2
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SimConfig:
    slo: Slo
    seed: int = 0
    scrape_interval_s: float = 0.05
    retrain_interval_s: float = 10.0
    sheddable_fraction: float = 0.0
    """Share of requests with priority -1 (the SLO admitter may shed them); the rest are 0."""
    transfer: TransferConfig = field(default_factory=TransferConfig)
    """The fabric's true costs per topology distance (bytes per token come from the profile)."""


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
    predicted_ttft_ms: FloatArray
    predicted_tpot_ms: FloatArray
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
                    if i < n or self._inflight:
                        self._push(t + self.config.retrain_interval_s, _TICK, 0, None)
        finally:  # kept if a policy raised while routing: the next call retries that arrival
            self._next_arrival, self._events = i, events
        return i < n or bool(heap)

    def _arrive(self, req: Request, now: float) -> None:
        v = self.view
        v.now = now
        route = self.policy.route(req)
        if route.shed:
            self._shed[req.rid] = True
            return
        self.routes[req.rid] = route
        self.policy.on_dispatch(req, route, now)
        self._inflight += 1
        first = route.prefill if route.prefill is not None else route.pod
        v.dispatched[first] += 1
        v.prefill_inflight[first] += route.uncached
        if route.prefill is not None:
            v.dispatched[route.pod] += 1
        server = self.servers[first]
        self._schedule_pod(
            server, server.enqueue(Seq(req, prefill_only=route.prefill is not None), now)
        )

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
                self._hit[req.rid] = o.seq.hit_tokens
            v.decode_inflight[route.pod] += req.prompt
            self.policy.on_first_token(req, route, o.time, (o.time - req.arrival) * 1000.0)
        elif isinstance(o, Handoff):
            v.dispatched[server.index] -= 1
            v.prefill_inflight[server.index] -= route.uncached
            self._hit[req.rid] = o.seq.hit_tokens
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
            predicted_ttft_ms=np.asarray([nan if r is None else r.ttft_ms for r in routes]),
            predicted_tpot_ms=np.asarray([nan if r is None else r.tpot_ms for r in routes]),
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


__all__ = ["SimConfig", "SimResult", "Simulation", "blocks", "max_context"]
