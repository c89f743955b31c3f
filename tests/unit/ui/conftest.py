"""Fixtures of the console's unit tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from backend import migrate
from backend.db import make_engine, make_sessionmaker


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Session]:
    """A session on a fresh SQLite database migrated by the real migrations."""
    url = f"sqlite:///{tmp_path / 'console.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        yield session
    engine.dispose()
