"""What routes depend on: the process-wide runtime and a per-request database session."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from backend.advisor.service import make_advisor
from backend.auth.tokens import TokenCache
from backend.capacity.helper import CapacityHelper
from backend.capacity.service import CapacityMonitor
from backend.pools.schemas import POOL_NAME_PATTERN
from backend.pools.service import PoolCache
from backend.predictor.serving import ModelStore
from backend.predictor.window import WindowSpec
from backend.registry.failures import FailureCounter, LocalFailures, RedisFailures
from backend.registry.notify import LocalNotifier, Notifier, RedisNotifier
from backend.registry.sync import StoreSync
from backend.routing.service import PolicyCache
from backend.samples.offload import IngestPool
from backend.samples.ratelimit import IngestLimiter
from backend.scheduling.decided import DecidedLedger
from backend.settings import Settings
from backend.telemetry import Telemetry
from backend.whatif.runner import WhatIfRunner


@dataclass
class Runtime:
    """Everything a process builds once at start-up and shares between requests."""

    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    pools: PoolCache = field(default_factory=PoolCache)
    rng: random.Random = field(default_factory=random.Random)
    store: ModelStore = field(default_factory=ModelStore)
    telemetry: Telemetry = field(default_factory=Telemetry)
    # Production mode: helper processes that store ingestion batches (see samples.offload).
    ingest_pool: IngestPool | None = None
    # Derived at start-up: bound to this runtime's sessions, store and mode.
    sync: StoreSync = field(init=False)
    notifier: Notifier = field(init=False)
    failures: FailureCounter = field(init=False)
    policy_cache: PolicyCache = field(init=False)
    tokens: TokenCache = field(init=False)
    capacity: CapacityMonitor = field(init=False)
    # The process computing ``capacity``'s reports, when not a thread of this one.
    capacity_helper: CapacityHelper | None = None
    _ledgers: dict[str, DecidedLedger] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.sync = StoreSync(self.sessions, self.store)
        self.policy_cache = PolicyCache(self.sessions)
        self.tokens = TokenCache(self.sessions)
        self.capacity = CapacityMonitor(
            self.sessions, self.store, self.policy_cache.get, self.settings.capacity
        )
        if self.settings.redis_url is not None:
            self.notifier = RedisNotifier(self.settings.redis_url)
            self.failures = RedisFailures(self.settings.redis_url)
        else:
            self.failures = LocalFailures()
            local = LocalNotifier()
            local.subscribe(self.sync)
            self.notifier = local

    @cached_property
    def advisor(self) -> WhatIfRunner:
        # Made on first use: a process that never advises starts no thread (stopped at shutdown).
        return make_advisor(self.settings, self.sessions)

    def decided(self, pool: str) -> DecidedLedger:
        """The pool's recent /v1/schedule decisions in this process (made on first use)."""
        ledger = self._ledgers.get(pool)
        if ledger is None:
            ledger = self._ledgers.setdefault(
                pool, DecidedLedger(self.settings.serving.decided_hold_ms / 1000.0)
            )
        return ledger

    @cached_property
    def ingest_limiter(self) -> IngestLimiter:
        return IngestLimiter(self.settings.ingest, self.settings.redis_url)

    @cached_property
    def window(self) -> WindowSpec:
        # Once per process: every ingested batch buckets its rows with it.
        return WindowSpec.from_settings(self.settings.window)

    async def pool_id(self, name: str) -> int:
        """A pool's id for async routes: from memory, the database (off the event loop) only
        the first time; PoolNotFound (404) for a pool that does not exist."""
        cached = self.pools.cached(name)
        if cached is not None:
            return cached

        def lookup() -> int:
            with self.sessions() as session:
                return self.pools.resolve(session, name)

        return await run_in_threadpool(lookup)


async def get_runtime(request: Request) -> Runtime:
    # Async so that FastAPI does not hand it to the thread pool (see auth.deps.current_actor).
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def get_session(runtime: RuntimeDep) -> Iterator[Session]:
    # Routes commit explicitly before answering; anything uncommitted is rolled back here.
    with runtime.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


# Row ids in paths: bounded so that an absurd number is a 422, not a database overflow.
IdPath = Annotated[int, Path(ge=1, le=2**62, description="Row id.")]
# Pool names in paths: only what a pool can be named, so that a control character (NUL, which
# PostgreSQL refuses in a string) is a 422 naming the parameter, not a database error.
PoolPath = Annotated[str, Path(pattern=POOL_NAME_PATTERN, description="Pool name.")]
