"""Demo mode (`headroom serve --demo`): simulated traffic so that a newcomer sees the product work.

A background thread ingests, every second, rows drawn by `backend.sim.latency.sample_rows`
from the measured GPU profiles shipped in `backend/sim/profiles/` (prompt and output lengths
from the Azure traces, prefix hits from the Mooncake traces, load from idle to saturated), as
the llm-d EPP would send them: a TTFT sample and a TPOT sample per request, each carrying the
prediction the currently served model made for it (so live error shows too). They go through
the same ingestion service as `POST /add_training_data_bulk`; the embedded trainer picks them
up like any others, so a first model is active within about ten seconds.
"""

from __future__ import annotations

import logging
import secrets
import threading
from typing import Any

import numpy as np

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
from backend.policies.schemas import ObjectiveCreate, PolicySpec
from backend.policies.service import (
    create_objective,
    create_policy,
    objective_by_name,
    policy_for_pool,
)
from backend.pools.schemas import PoolCreate
from backend.pools.service import PoolNotFound, create_pool, get_pool
from backend.predictor.serving import ModelsNotReady, predict_both
from backend.samples.schemas import TrainingEntry
from backend.samples.service import ingest
from backend.serving.schemas import columns
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

log = logging.getLogger("headroom.demo")

DEMO_USER = "demo"
# (pool, GPU profile): two pools, so that the Overview compares them.
DEMO_POOLS = (("default", "a100-llama3-8b"), ("h100", "h100-llama2-7b"))
DEMO_OBJECTIVES = (
    ("chat-critical", 100, "Interactive chat; never shed."),
    ("standard", 0, "Default traffic."),
    ("batch-summaries", -10, "Offline summarisation; shed first under load."),
)
DEMO_ACTOR = Actor(DEMO_USER, "admin", frozenset())
# 20 requests a second per pool (40 samples): a first model within about ten seconds, the
# window visibly filling within a minute, and training that keeps up on a laptop.
TICK_S = 1.0
ROWS_PER_TICK = 20


class DemoFeeder:
    def __init__(self, runtime: Runtime, seed: int = 7) -> None:
        self.runtime = runtime
        self.rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.password = ""

    def prepare(self) -> None:
        """Pools, objectives and the demo admin; safe to repeat on every start."""
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
            for name, profile in DEMO_POOLS:
                try:
                    pool = get_pool(session, name)
                except PoolNotFound:
                    pool = create_pool(
                        session, PoolCreate(name=name, description=f"Demo: simulated {profile}.")
                    )
                if policy_for_pool(session, pool.id) is None:
                    create_policy(session, pool.id, PolicySpec(), DEMO_USER)
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
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception:  # the demo must outlive a failed round (e.g. a locked database)
                log.exception("demo feeder round failed")

    def tick(self) -> int:
        """Ingest one round of simulated samples into every demo pool; returns rows added."""
        added = 0
        for pool, profile in DEMO_POOLS:
            entries = self.entries(pool, profile, ROWS_PER_TICK)
            pool_id = self.runtime.pools.cached(pool)
            with unit_of_work(self.runtime.sessions) as session:
                if pool_id is None:
                    pool_id = self.runtime.pools.resolve(session, pool)
                result = ingest(
                    session,
                    pool_id,
                    entries,
                    self.runtime.window,
                    self.runtime.settings.window.test_fraction,
                    self.runtime.rng,
                )
            added += result.ttft_rows + result.tpot_rows
        return added

    def entries(self, pool: str, profile: str, n: int) -> list[TrainingEntry]:
        rows = sample_rows(n, self.rng, load_profile(profile))
        entries = [TrainingEntry.model_validate(e) for e in training_entries(rows)]
        try:
            predictions = predict_both(self.runtime.store, pool, columns(list(entries)))
        except ModelsNotReady:
            return entries
        # What the router would have predicted at scheduling time: the Models page's live error.
        out = []
        for entry, ttft, tpot in zip(
            entries, predictions.ttft_ms, predictions.tpot_ms, strict=True
        ):
            update: dict[str, Any] = {}
            if entry.actual_ttft_ms > 0:
                update["predicted_ttft_ms"] = float(ttft)
            if entry.actual_tpot_ms > 0 and predictions.tpot is not None:
                update["predicted_tpot_ms"] = float(tpot)
            out.append(entry.model_copy(update=update))
        return out
