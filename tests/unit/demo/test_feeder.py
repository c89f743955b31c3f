"""Demo mode's feeder on a real (SQLite) embedded service: the shipped traces replayed through the
simulator, ingested as the EPP sends samples, trained on by the real trainer."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from sqlalchemy import func, select

from backend import migrate
from backend.auth.service import PASSWORD_MIN
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.demo.feeder import (
    DEMO_ACTOR,
    DEMO_POOLS,
    DEMO_SETUP,
    DemoFeeder,
    DemoPool,
    ServedRouting,
)
from backend.deps import Runtime
from backend.policies.mapping import to_scheduling
from backend.policies.service import policy_for_pool, update_policy
from backend.pools.service import ensure_default_pool, get_pool
from backend.predictor.knowable import MIN_ROWS
from backend.predictor.serving import ModelStore
from backend.registry.locks import LocalLocks
from backend.registry.trainer import Trainer
from backend.samples.models import Sample, TargetCode
from backend.scheduling.types import TransferConfig
from backend.settings import Settings, UISettings
from backend.sim.replay import Observation, TraceReplay
from backend.sim.traces import load_trace
from backend.ui.views import models_view


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    migrate.upgrade(url)
    settings = Settings(
        database_url=url,
        ui=UISettings(demo=True, demo_password=SecretStr("demo-password-for-tests")),
    )
    engine = make_engine(url)
    runtime = Runtime(settings=settings, engine=engine, sessions=make_sessionmaker(engine))
    with unit_of_work(runtime.sessions) as session:
        ensure_default_pool(session)
    yield runtime
    engine.dispose()


def _samples(runtime: Runtime, pool: str, target: TargetCode, after: int = 0) -> list[Sample]:
    pool_id = runtime.pools.cached(pool)
    with runtime.sessions() as session:
        return list(
            session.scalars(
                select(Sample)
                .where(Sample.pool_id == pool_id, Sample.target == int(target), Sample.id > after)
                .order_by(Sample.id)
            )
        )


def _expected(demo: DemoPool, seed: int, ticks: int) -> list[Observation]:
    """The pool's trace replayed on its own, with the router the feeder uses (no model served
    yet, so the library's heuristic fallback decides), one slice per tick."""

    def routing(fabric: TransferConfig, lap_seed: int) -> ServedRouting:
        return ServedRouting(ModelStore(), demo.name, to_scheduling(demo.policy_spec()), lap_seed)

    replay = TraceReplay(dataclasses.replace(demo.replay, seed=seed), routing)
    return [o for _ in range(ticks) for o in replay.advance(1.0 * demo.speed)]


TICKS = 20
"""Seconds of replay: Mooncake's 12k-token prompts reach their first tokens seconds after they
arrive, and the pool's eight pods all serve some in 20 s."""


def test_the_feeder_ingests_the_trace_replay_tick_by_tick(runtime: Runtime) -> None:
    assert DEMO_POOLS == (
        ("default", "a100-llama3-8b"),
        ("h100", "h100-llama2-7b"),
        ("pd", "a100-llama3-8b"),
    )
    feeder = DemoFeeder(runtime)
    feeder.prepare()
    added = [feeder.tick(1.0) for _ in range(TICKS)]
    # Samples in every tick, not in one burst (the first second has few: most of its requests
    # are still before their first token).
    assert all(n > 0 for n in added) and max(added) < sum(added) / 2
    for demo in DEMO_SETUP:
        replay = feeder.replays[demo.name]
        assert replay.elapsed_s == pytest.approx(TICKS * demo.speed)  # in step with the ticks
        expected = _expected(demo, feeder.seed, TICKS)
        trace = load_trace(demo.replay.trace).scaled(demo.replay.load)
        for target in (TargetCode.TTFT, TargetCode.TPOT):
            want = [o for o in expected if o.target == target.label]
            rows = _samples(runtime, demo.name, target)
            # Exactly the replay's observations, in the order the router made them...
            assert [(r.input_token_length, r.latency_ms, r.pod) for r in rows] == [
                (int(o.row[1]), o.label_ms, o.pod) for o in want
            ]
            # ...whose prompts are the trace's, request by request.
            assert [r.input_token_length for r in rows] == [
                int(trace.input_tokens[o.rid]) for o in want
            ]
            assert [r.num_request_running for r in rows] == [int(o.row[3]) for o in want]
        # From the trace's first request on: the requests that arrived in those seconds, but for
        # a few still waiting for their first token.
        arrived = int((trace.arrival_s <= replay.elapsed_s).sum())
        rids = sorted(o.rid for o in expected if o.target == "ttft")
        assert rids[0] == 0 and rids[-1] < arrived and len(rids) > 0.8 * arrived
        # Every pod's samples, each under its role: a P/D pool's first tokens from its prefill
        # pods, its completions from its decode pods, as llm-d's EPP labels them.
        view = replay.sim.view
        for target, role in ((TargetCode.TTFT, "prefill"), (TargetCode.TPOT, "decode")):
            pods = {
                f"{demo.replay.pod_prefix}-{s.index}" for s in view.servers if s.role in ("", role)
            }
            rows = _samples(runtime, demo.name, target)
            # (In 20 s some of Mooncake's pods have completed no answer yet.)
            seen = {r.pod for r in rows}
            assert seen == pods if target == TargetCode.TTFT else seen and seen <= pods
            assert {r.pod_role for r in rows} == {role if demo.replay.pd else None}


def test_each_sample_is_stamped_when_it_happened_not_when_ingested(runtime: Runtime) -> None:
    # As upstream's EPP stamps its samples: a second's arrivals stamped at the ingestion would
    # read as one burst to everything that replays arrivals from the samples.
    feeder = DemoFeeder(runtime)
    feeder.prepare()
    before = datetime.now(UTC)
    for _ in range(5):
        feeder.tick(1.0)
    taken = _expected(DEMO_SETUP[1], feeder.seed, 5)
    rows = sorted(
        _samples(runtime, "h100", TargetCode.TTFT) + _samples(runtime, "h100", TargetCode.TPOT),
        key=lambda r: r.id,
    )
    stamps = [r.observed_at.replace(tzinfo=UTC) for r in rows]
    assert len(rows) == len(taken) > 50
    assert len(set(stamps)) > 0.9 * len(stamps)  # not one stamp per tick
    assert before - timedelta(seconds=5) <= min(stamps) and max(stamps) <= datetime.now(UTC)
    # The last tick's samples (the newest rows), stamped at one "now": as far apart as the
    # simulated events.
    last = [o.time_s for o in taken if o.time_s > 4.0]
    stamped = sorted(stamps[-len(last) :])
    assert [(t - stamped[0]).total_seconds() for t in stamped] == pytest.approx(
        [t - last[0] for t in last], abs=1e-3
    )


def test_models_train_in_embedded_mode_and_route_the_replay(runtime: Runtime) -> None:
    feeder = DemoFeeder(runtime)
    feeder.prepare()
    for _ in range(25):  # Mooncake's first answers take some 20 s in real time
        feeder.tick(1.0)
    settings = runtime.settings
    trainer = Trainer(
        runtime.sessions, settings, LocalLocks(), runtime.notifier, failures=runtime.failures
    )
    outcomes = trainer.run_once()
    assert len(outcomes) == 2 * len(DEMO_POOLS) and {o.status for o in outcomes} == {"activated"}
    for pool, _ in DEMO_POOLS:  # served at once (the embedded notifier refreshes the store)
        assert runtime.store.get(pool, "ttft") is not None
        assert runtime.store.get(pool, "tpot") is not None
    seen = {
        pool: max(s.id for s in _samples(runtime, pool, TargetCode.TTFT)) for pool, _ in DEMO_POOLS
    }
    routers = {}
    for pool, _ in DEMO_POOLS:
        router = feeder.replays[pool].recorder.inner
        assert isinstance(router, ServedRouting)
        routers[pool] = router
    before = {pool: (r.decisions, r.fallbacks) for pool, r in routers.items()}
    for _ in range(30):
        feeder.tick(1.0)
    for pool, _ in DEMO_POOLS:
        decisions, fallbacks = before[pool]
        router = routers[pool]
        # The simulated router now predicts with the service's models...
        assert router.decisions - decisions > 50
        assert router.fallbacks == fallbacks
        # ...and the samples carry those predictions: the Models page's live error.
        fresh = _samples(runtime, pool, TargetCode.TTFT, seen[pool])
        with_prediction = [s for s in fresh if s.predicted_ms is not None]
        assert len(with_prediction) > 0.8 * len(fresh) > 40
        assert all(math.isfinite(s.predicted_ms or math.nan) for s in with_prediction)
    h100 = _samples(runtime, "h100", TargetCode.TPOT)
    assert any(s.predicted_ms is not None for s in h100)
    # Every 10th request also ran on a copy of its pod at dispatch, from the lap's start: the
    # Models page's live error against what was knowable, on the requests a model routed (the
    # first 25 s went by the fallback: none of theirs count).
    with runtime.sessions() as session:
        pool = get_pool(session, "h100")
        view = models_view(session, runtime.store, pool, TargetCode.TTFT, knowable=feeder.knowable)
    assert view.knowable is not None and view.knowable.n >= MIN_ROWS
    assert 0.0 < view.knowable.floor.mape < view.knowable.live.mape


def test_a_policy_edit_changes_the_demo_routing(runtime: Runtime) -> None:
    feeder = DemoFeeder(runtime)
    feeder.prepare()
    feeder.tick(1.0)
    router = feeder.replays["h100"].recorder.inner
    assert isinstance(router, ServedRouting)
    assert router.config.policy.strategy == "most"
    pool_id = runtime.pools.cached("h100")
    assert pool_id is not None
    with unit_of_work(runtime.sessions) as session:
        row = policy_for_pool(session, pool_id)
        assert row is not None
        update_policy(session, row, {"strategy": "least", "default_ttft_slo_ms": 800.0}, DEMO_ACTOR)
    runtime.policy_cache.invalidate()
    feeder.tick(1.0)
    assert router.config.policy.strategy == "least"
    assert feeder.replays["h100"].sim.view.slo.ttft_ms == 800.0


def test_the_feeder_thread_follows_the_wall_clock_and_never_runs_ahead(runtime: Runtime) -> None:
    started = time.monotonic()
    feeder = DemoFeeder(runtime).start()

    def simulated(demo: DemoPool) -> float:
        replay = feeder.replays.get(demo.name)
        return replay.elapsed_s if replay is not None else 0.0

    # Two simulated seconds of each pool's clock (times its speed-up) with the thread's own
    # ticks; the bound on waiting is generous because the machine may be busy, and the check
    # is that the replay never runs ahead of the wall clock, not how fast this machine is.
    try:
        deadline = started + 60
        while any(simulated(d) < 2.0 * d.speed for d in DEMO_SETUP):
            assert time.monotonic() < deadline, "the feeder stopped advancing"
            time.sleep(0.1)
    finally:
        feeder.stop()
    wall = time.monotonic() - started
    for demo in DEMO_SETUP:
        assert 2.0 * demo.speed <= simulated(demo) <= wall * demo.speed + 1e-6
    with runtime.sessions() as session:
        # Some 25 samples a second between the pools; the first second has fewer.
        assert session.scalar(select(func.count()).select_from(Sample)) > 10


def test_a_demo_password_the_console_would_refuse_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="demo_password"):
        UISettings(demo_password=SecretStr("x" * (PASSWORD_MIN - 1)))
    assert UISettings(demo_password=SecretStr("x" * PASSWORD_MIN)).demo_password is not None
