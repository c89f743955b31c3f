"""Migrations: one head, up and down on both backends, and models in step with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
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


def _default_policy(url: str) -> tuple[int, str, list[tuple[int, str]]]:
    """The default pool's policy: its version, strategy and history (version, changed_by)."""
    engine = make_engine(url)
    with engine.connect() as conn:
        version, spec = conn.execute(
            sa.text(
                "SELECT p.version, p.spec FROM policies p JOIN pools ON pools.id = p.pool_id "
                "WHERE pools.name = 'default'"
            )
        ).one()
        history = conn.execute(
            sa.text("SELECT version, changed_by FROM policy_versions ORDER BY version")
        ).all()
    engine.dispose()
    strategy = (json.loads(spec) if isinstance(spec, str) else spec)["strategy"]
    return version, strategy, [(v, by) for v, by in history]


def test_the_untouched_default_policy_moves_to_a_new_pools_strategy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'default.db'}"
    migrate.upgrade(url, "0010")
    assert _default_policy(url) == (1, "least", [(1, "system")])
    migrate.upgrade(url)
    assert _default_policy(url) == (2, "most", [(1, "system"), (2, "system")])
    migrate.downgrade(url, "0010")
    assert _default_policy(url) == (1, "least", [(1, "system")])


def test_an_edited_default_policy_keeps_its_strategy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'edited.db'}"
    migrate.upgrade(url, "0010")
    engine = make_engine(url)
    with engine.begin() as conn:
        # Someone chose upstream's `least` again (a version of their own): it is a choice.
        conn.execute(sa.text("UPDATE policies SET version = 2, updated_by = 'alice'"))
    engine.dispose()
    migrate.upgrade(url)
    assert _default_policy(url)[:2] == (2, "least")
    migrate.downgrade(url, "0010")
    assert _default_policy(url)[:2] == (2, "least")
