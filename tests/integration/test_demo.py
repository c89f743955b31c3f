"""Demo mode on PostgreSQL (embedded mode needs no Redis, any database): the replayed traces are
ingested through COPY, the real trainer trains on them, and the demo's policy replaces the
migration's untouched default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.demo.feeder import DEMO_POOLS, DEMO_SETUP, DemoFeeder
from backend.deps import Runtime
from backend.policies.service import policy_for_pool, spec_of
from backend.registry.locks import LocalLocks
from backend.registry.trainer import Trainer
from backend.samples.models import Sample
from backend.settings import Settings, UISettings
from backend.sim.traces import load_trace


@pytest.fixture
def runtime(
    database_url: str, engine: Engine, sessions: sessionmaker[Session]
) -> Iterator[Runtime]:
    settings = Settings(
        database_url=database_url,
        ui=UISettings(demo=True, demo_password=SecretStr("demo-password-for-tests")),
    )
    assert settings.embedded
    yield Runtime(settings=settings, engine=engine, sessions=sessions)


def test_demo_feeds_and_trains_on_postgresql(runtime: Runtime) -> None:
    feeder = DemoFeeder(runtime)
    feeder.prepare()
    with runtime.sessions() as session:
        for demo in DEMO_SETUP:
            pool_id = runtime.pools.resolve(session, demo.name)
            assert spec_of(policy_for_pool(session, pool_id)) == demo.policy_spec()
    # Every pool in real time: Mooncake's first answers need some 20 s before its TPOT samples.
    added = [feeder.tick(1.0) for _ in range(30)]
    assert all(n > 0 for n in added) and max(added) < sum(added) / 4
    with runtime.sessions() as session:
        assert session.scalar(select(func.count()).select_from(Sample)) == sum(added)
        for demo in DEMO_SETUP:
            pool_id = runtime.pools.resolve(session, demo.name)
            lengths = session.scalars(
                select(Sample.input_token_length).where(Sample.pool_id == pool_id)
            ).all()
            # (Azure's code trace, the P/D pool's, has 17 arrivals in its first 30 s.)
            assert len(lengths) > 30
            assert set(lengths) <= set(load_trace(demo.replay.trace).input_tokens.tolist())
    trainer = Trainer(
        runtime.sessions,
        runtime.settings,
        LocalLocks(),
        runtime.notifier,
        failures=runtime.failures,
    )
    outcomes = trainer.run_once()
    assert len(outcomes) == 2 * len(DEMO_POOLS) and {o.status for o in outcomes} == {"activated"}
    for pool, _ in DEMO_POOLS:
        assert runtime.store.get(pool, "ttft") is not None
        assert runtime.store.get(pool, "tpot") is not None
