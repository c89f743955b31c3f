"""Demo mode (`headroom serve --demo`): a shipped trace replayed through the simulator, so that a
newcomer sees the product work without an inference pool.

Each demo pool has a simulated pool of pods (`backend/sim/`: vLLM-style continuous batching on
the measured GPU profiles of `backend/sim/profiles/`) replaying one of the traces shipped in
`backend/sim/traces/` (`DEMO_SETUP`: Mooncake's conversation trace on eight A100s serving
Llama-3-8B for `default`, Azure's 2023 conversation trace at four times its rate on two H100s
serving Llama-2-7B for `h100`, Azure's 2023 code trace on two prefill and two decode A100s for
`pd`). A background thread advances every simulation in step with the
wall clock (`TraceReplay.advance`: each tick runs it as many simulated seconds as wall seconds
went by, times the pool's speed-up) and ingests what the simulated router observed in that slice
as the llm-d EPP reports it: a TTFT sample at each request's first token and a TPOT sample at its
completion, each stamped with when it happened, with the features the router saw for the chosen
pod when it dispatched the request (the pod's scraped gauges, its in-flight tokens, its
prefix-cache score, the pod's name). They go
through the same ingestion service as `POST /add_training_data_bulk`; the embedded trainer picks
them up like any others.

The simulated router is the service's own: the scheduling library with the pool's stored policy
(re-read every tick, so an edit on the Policies page changes the demo's routing) predicting with
the models the service serves for the pool, and the library's heuristic fallback until the first
one is active. Each sample carries the prediction the router used for it, so live error shows;
every 10th request is also run on a copy of its pod with no later arrivals (the present-state
floor), kept beside its prediction in ``knowable`` for the Models page's "live error against
what was knowable".
When a trace is over, a fresh simulation replays it again with the next seed.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.auth.service import (
    Actor,
    create_user,
    set_disabled,
    set_password,
    set_role,
    user_by_name,
)
from backend.db import unit_of_work
from backend.deps import Runtime
from backend.policies.schemas import UPSTREAM_SPEC, ObjectiveCreate, PolicySpec
from backend.policies.service import (
    SYSTEM,
    create_objective,
    create_policy,
    objective_by_name,
    policy_for_pool,
    spec_of,
    update_policy,
)
from backend.pools.schemas import PoolCreate
from backend.pools.service import PoolNotFound, create_pool, get_pool
from backend.predictor.knowable import FloorWindow
from backend.predictor.regressors import LatencyModel
from backend.predictor.serving import ModelStore, ServedModel
from backend.samples.schemas import TrainingEntry
from backend.samples.service import ingest
from backend.scheduling.types import SchedulingPolicy, TransferConfig
from backend.sim.engine import FLOOR_EVERY
from backend.sim.gpu import load_profile
from backend.sim.online import OnlinePredictor
from backend.sim.replay import Observation, ReplaySpec, TraceReplay
from backend.sim.routers import PredictedConfig
from backend.sim.routers.predicted import PredictedLatency
from backend.sim.view import RouterView, Slo

log = logging.getLogger("headroom.demo")

DEMO_USER = "demo"


@dataclass(frozen=True)
class DemoPool:
    name: str
    replay: ReplaySpec
    speed: float
    """Simulated seconds per wall-clock second."""
    target_slo_attainment: float = 0.95
    """The policy's share of requests to keep within SLO: what desired replicas sizes for."""

    def describe(self) -> str:
        pods = f"{self.replay.pods} simulated {self.replay.gpu} pods"
        if self.replay.pd is not None:
            prefill, _, decode = self.replay.pd.partition(":")
            pods += f" ({prefill} prefill, {decode} decode)"
        return f"Demo: the {self.replay.trace} trace replayed by the simulator on {pods}."

    def policy_spec(self) -> PolicySpec:
        """What the demo stores as the pool's policy: Headroom's measured choices (spread by
        headroom, deterministic best fit) and the pool's SLOs; editable on the Policies page."""
        return PolicySpec(
            default_ttft_slo_ms=self.replay.slo.ttft_ms,
            default_tpot_slo_ms=self.replay.slo.tpot_ms,
            strategy="most",
            picker="best_fit",
            kv_bytes_per_token=load_profile(self.replay.gpu).kv_bytes_per_token,
            target_slo_attainment=self.target_slo_attainment,
            # The demo knows its pods: its replays calibrate their profile alone.
            gpu_profile=self.replay.gpu,
        )


# The floor (what was knowable) is measured from each lap's start: the Models page compares it
# with the live error on the same requests, so the benchmark's first-minute warm-up, which keeps
# a cold start out of a run's figures, would only delay the table (a request routed before the
# first model carries no prediction and is not compared).
_FLOOR_WARMUP_S = 0.0

# Both pools run in real time. A faster clock would fill the window sooner, but the samples'
# times are the wall clock's while their latencies are the simulation's, so everything that
# reads arrivals from the samples sees them denser than the pods served them. At six times real
# time (the default pool's speed until a later session) desired replicas replayed Mooncake at
# 23.6 requests/s instead of 3.8 and calibrated an H100 x0.70 to serve it, for a pool of A100s
# (docs/capacity.md, "The demo's clock"). Mooncake's trace (3.4 requests/s, 12k-token prompts)
# keeps eight A100s busy at its own rate; Azure's conversation trace (5.5 requests/s, 1k-token
# prompts) runs at four times its rate on two H100s (about 20 requests a second). A first model
# needs 10 samples (`min_samples_fresh`): seconds on either pool.
DEMO_SETUP = (
    DemoPool(
        "default",
        ReplaySpec(
            trace="mooncake-conversation",
            gpu="a100-llama3-8b",
            pods=8,
            slo=Slo(2000.0, 100.0),
            pod_prefix="a100",
            floor_every=FLOOR_EVERY,
            floor_warmup_s=_FLOOR_WARMUP_S,
        ),
        speed=1.0,
        # Not the policy's usual 95 %: Mooncake's long prompts cap attainment near 0.70 at a 2 s
        # TTFT on any number of A100s, so at 95 % desired replicas had no count to find and fell
        # to the plateau rule (16 to 46 pods read on the Overview). At 60 % the traffic's true
        # count is 9-10 pods and the job's estimate matched it (docs/capacity.md, "The demo's
        # clock").
        target_slo_attainment=0.6,
    ),
    DemoPool(
        "h100",
        ReplaySpec(
            trace="azure-conv",
            gpu="h100-llama2-7b",
            pods=2,
            load=4.0,
            slo=Slo(500.0, 50.0),
            pod_prefix="h100",
            floor_every=FLOOR_EVERY,
            floor_warmup_s=_FLOOR_WARMUP_S,
        ),
        speed=1.0,
    ),
    # A P/D pool (llm-d's prefill/decode disaggregation: each role its own Deployment), so that
    # the console shows what only such a pool has: samples per role, and desired replicas and
    # saturation counts per role. Azure's code trace (1.5k-token prompts, a dozen output
    # tokens) at its own rate (2.6 requests a second) on two prefill and two decode A100s:
    # prefill-bound, so its capacity signals ask for more prefill pods and fewer decode pods
    # than it has (replayed before the models, 63 % of first tokens within the 1 s SLO on 2:2,
    # 87 % on 3:1; every TPOT within 100 ms).
    DemoPool(
        "pd",
        ReplaySpec(
            trace="azure-code",
            gpu="a100-llama3-8b",
            pods=4,
            pd="2:2",
            slo=Slo(1000.0, 100.0),
            pod_prefix="pd",
            # No floor: the simulator measures it on aggregated routes only (a P/D request's
            # outcome also depends on the decode pod and the transfer), so its Models page has
            # no "against what was knowable" table.
        ),
        speed=1.0,
    ),
)
# (pool, GPU profile): three pools, so that the Overview compares them.
DEMO_POOLS = tuple((p.name, p.replay.gpu) for p in DEMO_SETUP)
DEMO_OBJECTIVES = (
    ("chat-critical", 100, "Interactive chat; never shed."),
    ("standard", 0, "Default traffic."),
    ("batch-summaries", -10, "Offline summarisation; shed first under load."),
)
DEMO_ACTOR = Actor(DEMO_USER, "admin", frozenset())
# What the system stores for `default` before anyone edits it: 0003's upstream values, then 0011's
# (or a fresh pool's) new-pool default.
_UNTOUCHED = (UPSTREAM_SPEC, PolicySpec())
TICK_S = 1.0
MAX_TICK_S = 5.0
"""A tick never advances the simulations by more than this many wall seconds' worth: after a
stall they fall behind the wall clock rather than flood the service with a burst of samples."""


class ServedModels(OnlinePredictor):
    """The models the service serves for a pool, in the place of the simulated router's own
    online predictor: the demo's router predicts with what Headroom serves and learns through
    ingestion, not inside the simulation."""

    def __init__(self, store: ModelStore, pool: str) -> None:
        super().__init__()
        self.store = store
        self.pool = pool
        self._models: tuple[ServedModel, ServedModel | None] | None = None

    def add(
        self,
        target: Any,
        row: tuple[float, ...],
        label_ms: float,
        pod_class: str | None = None,
        predicted_ms: float = float("nan"),
    ) -> None:
        return None

    def retrain(self, now: float) -> None:
        return None

    def ready(self) -> bool:
        # The router asks right before it predicts: the models it sees now are the ones it uses.
        ttft = self.store.get(self.pool, "ttft")
        self._models = None if ttft is None else (ttft, self.store.get(self.pool, "tpot"))
        return self._models is not None

    def predict(
        self, cols: dict[str, npt.NDArray[np.float64]]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        if self._models is None:
            raise LookupError("no TTFT model yet")
        ttft, tpot = self._models
        ttft_ms = np.asarray(ttft.predict("ttft", cols), dtype=np.float64)
        if tpot is None:  # as the service answers a pool without a TPOT model
            return ttft_ms, np.zeros_like(ttft_ms)
        return ttft_ms, np.asarray(tpot.predict("tpot", cols), dtype=np.float64)

    def tpot_model(self) -> LatencyModel | None:
        tpot = self._models[1] if self._models is not None else None
        return None if tpot is None else tpot.model

    def ttft_model(self) -> LatencyModel | None:
        return None if self._models is None else self._models[0].model


class ServedRouting(PredictedLatency):
    """Headroom's scheduling library as the EPP runs it against the service: the pool's policy,
    the served models, prefix scores from the pods' caches (KV events)."""

    def __init__(self, store: ModelStore, pool: str, policy: SchedulingPolicy, seed: int) -> None:
        config = PredictedConfig(
            policy=policy,
            kind="hybrid",
            prefix="precise",
            pd_ttft_label="prefill",
            learn_transfer=True,
        )
        super().__init__("headroom-served", f"the service's models for pool {pool}", config, seed)
        self.store = store
        self.pool = pool

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self.predictors = {"": ServedModels(self.store, self.pool)}

    def use(self, policy: SchedulingPolicy) -> None:
        if policy != self.config.policy:
            self.config = dataclasses.replace(self.config, policy=policy)


class DemoFeeder:
    def __init__(self, runtime: Runtime, seed: int = 7, speed: float = 1.0) -> None:
        """``speed`` multiplies every pool's own speed-up (simulated seconds per wall second)."""
        self.runtime = runtime
        self.seed = seed
        self.speed = speed
        self.replays: dict[str, TraceReplay] = {}
        # The live predictions beside the floor, per pool and target (the Models page's).
        self.knowable = FloorWindow()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.password = ""

    def prepare(self) -> None:
        """Pools, their policies and objectives, and the demo admin; safe to repeat on every
        start."""
        settings = self.runtime.settings
        configured = settings.ui.demo_password
        self.password = configured.get_secret_value() if configured else secrets.token_urlsafe(9)
        with unit_of_work(self.runtime.sessions) as session:
            user = user_by_name(session, DEMO_USER)
            if user is None:
                create_user(session, DEMO_USER, self.password, "admin")
            else:
                set_password(session, user, self.password)
                set_role(session, user, "admin")
                set_disabled(session, user, False)
            for demo in DEMO_SETUP:
                name = demo.name
                try:
                    pool = get_pool(session, name)
                except PoolNotFound:
                    pool = create_pool(session, PoolCreate(name=name, description=demo.describe()))
                policy = policy_for_pool(session, pool.id)
                if policy is None:
                    create_policy(session, pool.id, demo.policy_spec(), DEMO_USER)
                elif policy.updated_by == SYSTEM and spec_of(policy) in _UNTOUCHED:
                    # The policy the migrations stored for `default` (upstream's defaults, then
                    # a new pool's), never edited by anyone: the demo's instead (recorded in the
                    # policy's history).
                    update_policy(
                        session, policy, demo.policy_spec().model_dump(mode="json"), DEMO_ACTOR
                    )
                for objective, priority, description in DEMO_OBJECTIVES:
                    if objective_by_name(session, pool.id, objective) is None:
                        create_objective(
                            session,
                            pool.id,
                            ObjectiveCreate(
                                pool=name,
                                name=objective,
                                priority=priority,
                                description=description,
                            ),
                            DEMO_ACTOR,
                        )
        if configured is None:
            # Nobody else knows this password: it has to reach the person at the terminal.
            log.warning("demo mode: sign in to the console as %s / %s", DEMO_USER, self.password)

    def start(self) -> DemoFeeder:
        self.prepare()
        self._thread = threading.Thread(target=self._loop, name="demo-feeder", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            elapsed, last = min(now - last, MAX_TICK_S), now
            try:
                self.tick(elapsed)
            except Exception:  # the demo must outlive a failed round (e.g. a locked database)
                log.exception("demo feeder round failed")

    def replay(self, demo: DemoPool) -> TraceReplay:
        """The pool's replay, made on first use (loading a trace takes a moment)."""
        replay = self.replays.get(demo.name)
        if replay is None:
            spec = dataclasses.replace(demo.replay, seed=self.seed)
            store, pool = self.runtime.store, demo.name

            def routing(fabric: TransferConfig, seed: int) -> ServedRouting:
                return ServedRouting(store, pool, self._policy(pool), seed)

            replay = self.replays[demo.name] = TraceReplay(spec, routing)
        return replay

    def _pool_id(self, pool: str) -> int:
        pool_id = self.runtime.pools.cached(pool)
        if pool_id is None:
            with self.runtime.sessions() as session:
                pool_id = self.runtime.pools.resolve(session, pool)
        return pool_id

    def _policy(self, pool: str) -> SchedulingPolicy:
        return self.runtime.policy_cache.get(self._pool_id(pool)).policy

    def tick(self, seconds: float = TICK_S) -> int:
        """Advance every demo pool's simulation by ``seconds`` of wall-clock time (times its
        speed-up) and ingest what its router observed meanwhile; returns rows added."""
        added = 0
        for demo in DEMO_SETUP:
            observations = self.observe(demo, seconds)
            if not observations:
                continue
            entries = self._entries(demo, observations)
            pool_id = self._pool_id(demo.name)
            with unit_of_work(self.runtime.sessions) as session:
                result = ingest(
                    session,
                    pool_id,
                    entries,
                    self.runtime.window,
                    self.runtime.settings.window.test_fraction,
                    self.runtime.rng,
                )
            added += result.ttft_rows + result.tpot_rows
            for o in observations:  # beside what was ingested, not before it
                self.knowable.add(
                    demo.name, o.target, o.label_ms, o.predicted_ms, o.floor_ms, o.load
                )
        return added

    def _entries(self, demo: DemoPool, observations: list[Observation]) -> list[TrainingEntry]:
        """The observations as the EPP posts them, each stamped with when it happened, as
        upstream's EPP stamps its samples: on the wall clock, the slice's end being now.
        Stamped at ingestion instead, a second's arrivals would all read as one instant, and
        the replays that read arrivals from the samples (desired replicas, the saturation
        level's next interval) would see bursts the pods never served."""
        replay = self.replays[demo.name]
        now = datetime.now(UTC)
        per_wall_s = demo.speed * self.speed
        out = []
        for o in observations:
            ago_s = (replay.elapsed_s - replay.elapsed_at(o)) / per_wall_s
            entry = o.entry() | {"timestamp": now - timedelta(seconds=max(ago_s, 0.0))}
            out.append(TrainingEntry.model_validate(entry))
        return out

    def observe(self, demo: DemoPool, seconds: float) -> list[Observation]:
        """Run the pool's replay ``seconds`` of wall-clock time further, routing with the pool's
        current policy; what its router observed."""
        replay = self.replay(demo)
        pool_policy = self.runtime.policy_cache.get(self._pool_id(demo.name))
        routing = replay.recorder.inner
        if isinstance(routing, ServedRouting):
            routing.use(pool_policy.policy)
        spec = pool_policy.spec
        replay.sim.view.slo = Slo(
            spec.default_ttft_slo_ms or demo.replay.slo.ttft_ms,
            spec.default_tpot_slo_ms or demo.replay.slo.tpot_ms,
        )
        return replay.advance(seconds * demo.speed * self.speed)
