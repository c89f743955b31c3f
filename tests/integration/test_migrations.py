"""Migrations: one head, up and down on both backends, and models in step with them."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from backend import migrate
from backend.db import Base, load_all_models, make_engine
from tests.conftest import db_url_for_tests
from tests.pg import database_url_variant, recreate_database


def test_single_head() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1


def _roundtrip_and_compare(url: str) -> None:
    migrate.upgrade(url)
    migrate.downgrade(url, "base")
    migrate.upgrade(url)
    load_all_models()
    engine = make_engine(url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == [], f"models and migrations differ: {diff}"


def test_postgresql_upgrade_downgrade_and_no_drift() -> None:
    url = database_url_variant(db_url_for_tests(), "migrations")
    recreate_database(url)
    _roundtrip_and_compare(url)


@pytest.mark.parametrize("name", ["headroom.db"])
def test_sqlite_upgrade_downgrade_and_no_drift(tmp_path: Path, name: str) -> None:
    _roundtrip_and_compare(f"sqlite:///{tmp_path / name}")
