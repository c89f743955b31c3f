from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, select, text

from backend import migrate
from backend.app import create_app
from backend.db import Base, load_all_models, make_engine, make_sessionmaker, unit_of_work
from backend.policies.schemas import PolicySpec
from backend.policies.service import create_policy
from backend.pools.models import Pool
from backend.pools.service import ensure_default_pool
from backend.settings import IngestSettings, ServingSettings, Settings, UISettings
from tests.conftest import db_url_for_tests, redis_url_for_tests
from tests.pg import recreate_database
from tests.server import TEST_SESSION_SECRET


@pytest.fixture(scope="session")
def database_url() -> str:
    """A fresh test database, migrated by the real migrations, once per test session."""
    url = db_url_for_tests()
    try:
        recreate_database(url)
    except Exception as exc:  # a clear message beats a stack of connection errors
        pytest.exit(f"PostgreSQL at {url} is not reachable: {exc}", returncode=3)
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def empty_all_tables(engine: Engine) -> None:
    """Empty every table the models declare (children first), whichever domain added it."""
    load_all_models()
    quote = engine.dialect.identifier_preparer.format_table
    names = ", ".join(quote(t) for t in reversed(Base.metadata.sorted_tables))
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))


@pytest.fixture(autouse=True)
def clean_database(engine: Engine) -> None:
    """Each test starts from the migrated state: empty tables and the default pool."""
    empty_all_tables(engine)
    # The migrated state: the default pool and a new pool's default policy, made by the same
    # code (the migrations reach that spec as version 2: 0003 stored upstream's, 0011 moved it).
    with unit_of_work(make_sessionmaker(engine)) as session:
        ensure_default_pool(session)
        session.flush()
        pool_id = session.scalar(select(Pool.id).where(Pool.name == "default"))
        assert pool_id is not None
        create_policy(session, pool_id, PolicySpec(), "system")


def production_settings(database_url: str, ingest_processes: int = 0) -> Settings:
    """Production mode (Redis configured): the API runs no background loop of its own, so a
    test decides when trimming happens. Ingestion stores in the API process unless a test asks
    for helper processes (starting them costs a second per app; test_ingestion runs every
    case both ways). `/v1/schedule` holds no decision (a test that schedules twice expects the
    same answer whatever the time between its calls; test_schedule holds them on purpose)."""
    return Settings(
        database_url=database_url,
        redis_url=redis_url_for_tests(),
        ui=UISettings(session_secret=SecretStr(TEST_SESSION_SECRET)),
        ingest=IngestSettings(processes=ingest_processes),
        serving=ServingSettings(decided_hold_ms=0.0),
    )


@pytest.fixture
def settings(database_url: str) -> Settings:
    return production_settings(database_url)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def sessions(engine: Engine):  # type: ignore[no-untyped-def]
    return make_sessionmaker(engine)
