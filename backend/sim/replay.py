"""Live replay: a shipped trace run through the simulator in slices of simulated time, reporting
what an llm-d EPP reports to the latency predictor as the requests progress.

``TraceReplay.advance(seconds)`` runs the simulation that many simulated seconds further
(``Simulation.run_until``) and returns the observations made in that slice, in the order they
happened:

* a **TTFT observation** at a request's first token: label arrival -> first token;
* a **TPOT observation** when it completes (requests with more than one output token): label
  the mean time per output token after the first.

Both carry the wire features the router saw for the chosen pod when it dispatched the request
(``backend.sim.online.FIELDS``: the pod's last scraped gauges, the router's own in-flight
counts, the pod's prefix-cache score for the prompt, its role) and what the router predicted,
if it predicts. Policies that predict (``PredictedLatency``) record those features themselves;
for the others ``Recorder`` builds them the same way, with the prefix score from the pod's cache
(what KV events report). When the trace is over and every request has finished, a fresh
simulation of the same trace starts (the next *lap*, with the next seed) where the slice left
off, so a replay never ends.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from backend.predictor.features import POD_TYPE_CODES, Target
from backend.scheduling.types import Distance, TransferConfig
from backend.sim.engine import SimConfig, Simulation
from backend.sim.entries import COUNT_FIELDS
from backend.sim.gpu import load_profile
from backend.sim.online import FIELDS
from backend.sim.pool import PodSpec, build_pool
from backend.sim.routers import make_policy
from backend.sim.routers.base import Route, RoutingPolicy, Row
from backend.sim.routers.predicted import router_row
from backend.sim.routers.prefix_index import block_share
from backend.sim.server import Request
from backend.sim.traces.loader import Trace, load_trace
from backend.sim.view import RouterView, Slo

POD_TYPE_NAMES: Final = {code: name for name, code in POD_TYPE_CODES.items()}
_INT_FIELDS: Final = frozenset(COUNT_FIELDS)
_RUNNING, _WAITING = FIELDS.index("num_request_running"), FIELDS.index("num_request_waiting")


@dataclass(frozen=True, slots=True)
class Observation:
    """One training sample as the router reports it."""

    target: Target
    lap: int
    rid: int  # the request's index in the replayed trace
    time_s: float  # when it was observed, simulated seconds since the lap started
    pod: str  # the pod that served it (under P/D the TTFT's is the prefill pod)
    row: Row  # wire features at dispatch, in ``FIELDS`` order
    label_ms: float
    predicted_ms: float  # what the router predicted for it; NaN if it predicted nothing
    floor_ms: float = math.nan
    """The present-state floor for it (``ReplaySpec.floor_every``); NaN where not sampled.
    Not part of what the EPP sends: the console sets it beside the live error."""

    @property
    def load(self) -> float:
        """Requests running + waiting on the pod when it was routed (as its features say)."""
        return float(self.row[_RUNNING] + self.row[_WAITING])

    def features(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in zip(FIELDS, self.row, strict=True):
            if name == "pod_type":
                out[name] = POD_TYPE_NAMES[int(value)]
            elif name in _INT_FIELDS:
                out[name] = int(value)
            else:
                out[name] = float(value)
        return out

    def entry(self) -> dict[str, Any]:
        """As the EPP sends it (`/add_training_data_bulk`): a TTFT sample has
        ``actual_tpot_ms = 0`` and ``num_tokens_generated = 0`` (it was taken at the first
        token); a TPOT sample has ``actual_ttft_ms = 0``."""
        features = self.features()
        predicted = self.predicted_ms if math.isfinite(self.predicted_ms) else None
        if self.target == "ttft":
            features["num_tokens_generated"] = 0
            return {
                **features,
                "actual_ttft_ms": self.label_ms,
                "actual_tpot_ms": 0.0,
                "predicted_ttft_ms": predicted,
                "pod": self.pod,
            }
        return {
            **features,
            "actual_ttft_ms": 0.0,
            "actual_tpot_ms": self.label_ms,
            "predicted_tpot_ms": predicted,
            "pod": self.pod,
        }


class Recorder(RoutingPolicy):
    """Wraps a routing policy (which decides everything) and records its observations."""

    def __init__(self, inner: RoutingPolicy, lap: int = 0) -> None:
        super().__init__()
        self.inner = inner
        self.name = inner.name
        self.reproduces = inner.reproduces
        self.learns = inner.learns
        self.lap = lap
        self.observations: list[Observation] = []

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self.inner.bind(view)

    def route(self, req: Request) -> Route:
        route = self.inner.route(req)
        if not route.shed and route.ttft_row is None:
            first = route.prefill if route.prefill is not None else route.pod
            route.ttft_row = self._row(req, first)
            route.tpot_row = self._row(req, route.pod) if first != route.pod else route.ttft_row
        return route

    def _row(self, req: Request, pod: int) -> Row:
        """What the router knows of ``pod`` right now, as ``PredictedLatency`` builds it."""
        server = self.view.servers[pod]
        prefix = block_share(server.prefix_hit_units(req.units), req.prompt)
        return router_row(self.view, req, pod, prefix)

    def _observe(
        self, target: Target, req: Request, route: Route, now: float, label_ms: float
    ) -> None:
        row = route.ttft_row if target == "ttft" else route.tpot_row
        if row is None or not label_ms > 0:
            return
        pod = route.prefill if target == "ttft" and route.prefill is not None else route.pod
        predicted = route.ttft_ms if target == "ttft" else route.tpot_ms
        self.observations.append(
            Observation(
                target,
                self.lap,
                req.rid,
                now,
                self.view.servers[pod].name,
                row,
                label_ms,
                predicted if predicted > 0 else math.nan,  # NaN stays NaN
            )
        )

    def take(self) -> list[Observation]:
        """The observations since the last call."""
        out, self.observations = self.observations, []
        return out

    # Every hook goes to the wrapped policy first.
    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        self.inner.on_dispatch(req, route, now)

    def on_first_token(self, req: Request, route: Route, now: float, ttft_ms: float) -> None:
        self.inner.on_first_token(req, route, now, ttft_ms)
        self._observe("ttft", req, route, now, ttft_ms)

    def on_handoff(self, req: Request, route: Route, now: float, prefill_ms: float) -> None:
        self.inner.on_handoff(req, route, now, prefill_ms)

    def on_transfer(self, kv_bytes: int, distance: Distance, ms: float) -> None:
        self.inner.on_transfer(kv_bytes, distance, ms)

    def on_done(self, req: Request, route: Route, now: float, tpot_ms: float | None) -> None:
        self.inner.on_done(req, route, now, tpot_ms)
        if tpot_ms is not None:
            self._observe("tpot", req, route, now, tpot_ms)

    def tick(self, now: float) -> None:
        self.inner.tick(now)

    def summary(self) -> dict[str, Any]:
        return self.inner.summary()


DEFAULT_SLO: Final = Slo(2000.0, 100.0)
"""The benchmark's SLOs (2 s to the first token, 100 ms per output token)."""

PolicyFactory = Callable[[TransferConfig, int], RoutingPolicy]
"""(the pool's fabric, the lap's seed) -> a fresh routing policy for the lap."""


@dataclass(frozen=True)
class ReplaySpec:
    trace: str = "mooncake-conversation"
    gpu: str = "a100-llama3-8b"
    """One profile for every pod, or a mix (``build_pool``'s syntax)."""
    pods: int = 8
    pd: str | None = None
    """A P/D split of the pods, ``"P:D"`` (``build_pool``'s syntax); None: every pod serves both
    phases."""
    load: float = 1.0
    """Arrival-rate multiple of the trace (``Trace.scaled``)."""
    duration_s: float | None = None
    """Replay only the requests arriving in the first ``duration_s`` (scaled) seconds."""
    policy: str = "least-request"
    """A simulator policy name; ``TraceReplay``'s ``policy`` factory overrides it."""
    slo: Slo = DEFAULT_SLO
    seed: int = 0
    pod_prefix: str = "pod"
    """Pods are named ``{pod_prefix}-{i}``."""
    floor_every: int = 0
    """Measure the present-state floor on every n-th request (``SimConfig.floor_every``; 0:
    off), after each lap's first ``floor_warmup_s``: observations carry it as ``floor_ms``."""
    floor_warmup_s: float = SimConfig.floor_warmup_s


class TraceReplay:
    def __init__(self, spec: ReplaySpec, policy: PolicyFactory | None = None) -> None:
        trace = load_trace(spec.trace).scaled(spec.load)
        if spec.duration_s is not None:
            trace = trace.window(0.0, spec.duration_s)
        if len(trace) == 0:
            raise ValueError(f"nothing to replay: {spec.trace} has no request in the slice")
        self.spec = spec
        self.pods: tuple[PodSpec, ...] = tuple(
            dataclasses.replace(p, name=f"{spec.pod_prefix}-{i}")
            for i, p in enumerate(build_pool(spec.pods, spec.gpu, spec.pd))
        )
        self.fabric = TransferConfig(
            kv_bytes_per_token=load_profile(self.pods[0].profile).kv_bytes_per_token
        )
        self._factory: PolicyFactory = policy or (
            lambda fabric, seed: make_policy(spec.policy, fabric, seed)
        )
        self._trace = trace
        self.lap = -1
        self.now = 0.0  # simulated seconds since the current lap started
        self.elapsed_s = 0.0  # simulated seconds since the replay started
        self._lap_started: dict[int, float] = {}  # lap -> elapsed_s when it started
        self._start_lap()

    @property
    def trace(self) -> Trace:
        """What the current lap replays (the simulation clips prompts no pod could hold)."""
        return self.sim.trace

    def elapsed_at(self, o: Observation) -> float:
        """When ``o`` was observed, in simulated seconds since the replay started (its time is
        its lap's): what lets a caller stamp it on one clock across laps. For the observations
        of the last ``advance`` call."""
        return self._lap_started[o.lap] + o.time_s

    def _start_lap(self) -> None:
        self.lap += 1
        self._lap_started[self.lap] = self.elapsed_s
        seed = self.spec.seed + self.lap
        self.recorder = Recorder(self._factory(self.fabric, seed), self.lap)
        self.sim = Simulation(
            self._trace,
            self.pods,
            self.recorder,
            SimConfig(
                self.spec.slo,
                seed=seed,
                transfer=self.fabric,
                floor_every=self.spec.floor_every,
                floor_warmup_s=self.spec.floor_warmup_s,
            ),
        )
        self.now = 0.0

    def _taken(self) -> list[Observation]:
        """The recorder's observations since the last call, with their floor where sampled
        (measured at dispatch, so known by the first token)."""
        taken = self.recorder.take()
        if not self.spec.floor_every:
            return taken
        return [dataclasses.replace(o, floor_ms=self.sim.floor_ms(o.target, o.rid)) for o in taken]

    def advance(self, seconds: float) -> list[Observation]:
        """Run ``seconds`` of simulated time further; the observations made meanwhile."""
        out: list[Observation] = []
        left = max(0.0, seconds)
        # Earlier laps' observations were all returned by earlier calls.
        self._lap_started = {self.lap: self._lap_started[self.lap]}
        while True:
            until = self.now + left
            more = self.sim.run_until(until)
            out += self._taken()
            if more:
                self.elapsed_s += until - self.now
                self.now = until
                return out
            # The lap ended inside this slice (its last request finished at view.now): the
            # rest of the slice goes to the next lap.
            ended = min(max(self.sim.view.now, self.now), until)
            self.elapsed_s += ended - self.now
            left = until - ended
            self._start_lap()
            if left <= 0.0:
                return out
