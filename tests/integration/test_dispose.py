"""Disposing an engine leaves no connection open: not those in its pool, and not one checked out
at that moment and returned afterwards (which the garbage collector would otherwise find open,
warning in whatever test runs then)."""

from __future__ import annotations

import gc

from sqlalchemy import text

from backend.db import dispose, make_engine


def test_a_connection_returned_after_dispose_is_closed(database_url: str) -> None:
    engine = make_engine(database_url)
    idle = engine.connect()
    idle.execute(text("SELECT 1"))
    idle.close()  # back in the pool: dispose closes it
    late = engine.connect()
    late.execute(text("SELECT 1"))
    raw = late.connection.dbapi_connection
    assert raw is not None and not raw.closed
    dispose(engine)
    assert not raw.closed  # still in use: dispose does not pull it from under its user
    late.close()  # returned to the discarded pool
    assert raw.closed
    # Nothing open is left for the collector (an open one would warn, an error in this suite).
    del late, raw
    gc.collect()
    with engine.connect() as fresh:  # the engine itself still works, on a new pool
        assert fresh.execute(text("SELECT 1")).scalar() == 1
    dispose(engine)
