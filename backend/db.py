"""One engine factory for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, Dialect, Engine, MetaData, TypeDecorator, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

# Stable constraint names, so that Alembic migrations are identical on both backends.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware in, timezone-aware (UTC) out, on both backends.

    SQLite stores no offset, so without this every time read back from it would be naive, and
    the upstream Go client cannot decode a timestamp without a timezone.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime}  # noqa: RUF012


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API read while the in-process trainer writes; foreign keys are off by default.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)


def dispose(engine: Engine) -> None:
    """Close the engine's pooled connections, and those still checked out as they come back.

    ``Engine.dispose`` closes only the connections in the pool; one checked out at that moment
    (a request whose session closes after its answer went out, a background round finishing)
    is returned to the discarded pool later and left for the garbage collector, which closes
    nothing and warns. A listener on the discarded pool closes each one on its return."""
    discarded = engine.pool
    event.listen(discarded, "checkin", _close_on_return)
    engine.dispose()


def _close_on_return(dbapi_connection: Any, _record: Any) -> None:
    if dbapi_connection is not None:
        dbapi_connection.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def short_lived_sessions(url: str) -> Iterator[sessionmaker[Session]]:
    """Sessions on an engine of their own that is disposed on the way out: for a command that
    runs once (the CLI). An engine left to the garbage collector closes nothing, and its open
    connections surface later as ResourceWarnings in whatever code runs then."""
    engine = make_engine(url)
    try:
        yield make_sessionmaker(engine)
    finally:
        dispose(engine)


@contextmanager
def unit_of_work(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits when the block succeeds and rolls back when it raises."""
    with factory() as session:
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise


def load_all_models() -> None:
    """Import every domain's tables so that Base.metadata knows them (Alembic, tests).

    Found by convention, not listed: every `models.py` under backend/ declares tables (the ML
    models live in predictor/regressors.py), so a new domain's tables cannot be forgotten here.
    """
    root = Path(__file__).parent
    for path in sorted(root.rglob("models.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        importlib.import_module(".".join(parts))
