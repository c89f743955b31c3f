"""Tests start from empty tables, whichever tables the models declare."""

from __future__ import annotations

from sqlalchemy import Column, Engine, Integer, Table, func, insert, select

from backend.db import Base
from tests.integration.conftest import empty_all_tables


def test_a_newly_declared_table_is_emptied_between_tests(engine: Engine) -> None:
    # A table some future domain adds; no foreign key, so no other table's CASCADE empties it.
    scratch = Table("scratch_rows", Base.metadata, Column("id", Integer, primary_key=True))
    pools = Base.metadata.tables["pools"]
    try:
        scratch.create(engine)
        with engine.begin() as conn:
            conn.execute(insert(scratch), [{"id": 1}, {"id": 2}])
        empty_all_tables(engine)
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(scratch)) == 0
            assert conn.scalar(select(func.count()).select_from(pools)) == 0
    finally:
        scratch.drop(engine, checkfirst=True)
        Base.metadata.remove(scratch)
