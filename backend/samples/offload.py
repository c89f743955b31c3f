"""Ingestion batches parsed, validated and stored by helper processes of an API process.

Why: an API process has one GIL. Turning 1,000 JSON entries into validated rows and handing
them to COPY takes about 10 ms of Python, and while that runs no prediction is answered
(on the event loop) or every prediction waits for the GIL several times over (in a thread).
At 20 such batches a second next to 500 bulk predictions, one process saturates. Here the
event loop only receives the body and passes its bytes on; the helper process answers with
what happened. Acknowledged still means committed: the helper commits before it answers.

Used in production mode (PostgreSQL); the embedded mode stores in-process, as SQLite allows
one writer and a newcomer's laptop needs no extra processes. `ingest.processes = 0` turns it
off everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import random
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import make_url
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from backend.children import exit_with_parent
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.errors import StorageUnavailable, body_errors
from backend.pools.service import PoolCache, PoolNotFound
from backend.predictor.window import WindowSpec
from backend.samples import service
from backend.samples.schemas import SamplesBulk, UpstreamTrainingBulk
from backend.settings import Settings

log = logging.getLogger("headroom.ingest")

NICENESS = 5  # below the API's CPU priority (the saturation helper's is lower still)

BodyKind = Literal["samples", "upstream"]
BODIES: dict[BodyKind, type[SamplesBulk | UpstreamTrainingBulk]] = {
    "samples": SamplesBulk,
    "upstream": UpstreamTrainingBulk,
}


@dataclass(frozen=True)
class Stored:
    done: service.Ingested


@dataclass(frozen=True)
class Invalid:
    errors: list[dict[str, Any]]  # pydantic's, locations relative to the body


@dataclass(frozen=True)
class UnknownPool:
    name: str


@dataclass(frozen=True)
class Unavailable:
    reason: str


Outcome = Stored | Invalid | UnknownPool | Unavailable


# --- inside a helper process ---------------------------------------------------------------


@dataclass
class _Helper:
    sessions: sessionmaker[Session]
    pools: PoolCache
    window: WindowSpec
    test_fraction: float
    rng: random.Random


_helper: _Helper | None = None


def _start_helper(settings: Settings) -> None:
    global _helper
    exit_with_parent()
    # Predictions are the latency-critical work on a shared machine; ingestion only has to
    # keep up. A lower priority lets the API process run first when both want a core.
    os.nice(NICENESS)
    engine = make_engine(settings.database_url)
    _helper = _Helper(
        sessions=make_sessionmaker(engine),
        pools=PoolCache(),
        window=WindowSpec.from_settings(settings.window),
        test_fraction=settings.window.test_fraction,
        rng=random.Random(),
    )


def _ready() -> bool:
    return _helper is not None


def store_batch(body: bytes, kind: BodyKind, pool: str) -> Outcome:
    """Parse, validate and append one batch; runs in a helper process."""
    helper = _helper
    assert helper is not None, "helper process not initialised"
    try:
        parsed = BODIES[kind].model_validate_json(body)
    except ValidationError as exc:  # pydantic's JSON parser validates while it parses
        return Invalid(_plain_errors(exc))
    try:
        with unit_of_work(helper.sessions) as session:
            pool_id = helper.pools.resolve(session, pool)
            done = service.ingest(
                session, pool_id, parsed.entries, helper.window, helper.test_fraction, helper.rng
            )
    except PoolNotFound:
        return UnknownPool(pool)
    except (OperationalError, InterfaceError) as exc:
        return Unavailable(type(exc).__name__)
    return Stored(done)


def _plain_errors(exc: ValidationError) -> list[dict[str, Any]]:
    """Errors that cross a process boundary: the context's values as text (a validator's
    exception object need not pickle)."""
    out = []
    for error in exc.errors(include_url=False):
        ctx = error.get("ctx")
        if ctx:
            error["ctx"] = {
                k: v if isinstance(v, int | float | str) else str(v) for k, v in ctx.items()
            }
        out.append(dict(error))
    return out


# --- in the API process --------------------------------------------------------------------


def wanted(settings: Settings) -> int:
    """How many helper processes this API process starts (0: it stores batches itself)."""
    postgres = make_url(settings.database_url).get_backend_name() == "postgresql"
    return settings.ingest.processes if postgres and not settings.embedded else 0


class IngestPool:
    """The API process's helper processes, restarted if one dies."""

    def __init__(self, settings: Settings, processes: int) -> None:
        self._settings = settings
        self._processes = processes
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        # spawn: forking a process that already runs threads (the event loop's pool, the model
        # listener) can copy a held lock into the child.
        return ProcessPoolExecutor(
            max_workers=self._processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start_helper,
            initargs=(self._settings,),
        )

    def warm_up(self) -> None:
        """Start every helper now, so that the first batch does not pay for the imports."""
        for future in [self._executor.submit(_ready) for _ in range(self._processes)]:
            future.result(timeout=120)

    async def store(self, body: bytes, kind: BodyKind, pool: str) -> service.Ingested:
        """Store one batch, or raise what the route would have raised storing it in-process:
        RequestValidationError (422), PoolNotFound (404), StorageUnavailable (503)."""
        executor = self._executor
        try:
            outcome = await asyncio.wrap_future(executor.submit(store_batch, body, kind, pool))
        except BrokenProcessPool:
            # A helper died (killed, out of memory) with this batch: the 503 says "not stored,
            # send it again". Only a death between its commit and its answer makes that resend
            # a duplicate, the same window a crash of the API process itself has.
            log.error("an ingestion process died; restarting the pool")
            if self._executor is executor:
                self._executor = self._new_executor()
            executor.shutdown(wait=False)
            raise StorageUnavailable("ingestion process restarted") from None
        if isinstance(outcome, Stored):
            return outcome.done
        if isinstance(outcome, Invalid):
            raise body_errors(outcome.errors)
        if isinstance(outcome, UnknownPool):
            raise PoolNotFound(outcome.name)
        raise StorageUnavailable(outcome.reason)

    def close(self) -> None:
        # Batches in flight finish: their callers are waiting for the commit.
        self._executor.shutdown(wait=True)
