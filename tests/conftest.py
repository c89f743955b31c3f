"""Shared fixtures. Integration tests use the real PostgreSQL and Redis named by
HEADROOM_TEST_DATABASE_URL / HEADROOM_TEST_REDIS_URL (defaults: the local servers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DEFAULT_TEST_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/headroom_test"
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/15"


def db_url_for_tests() -> str:
    return os.environ.get("HEADROOM_TEST_DATABASE_URL", DEFAULT_TEST_DATABASE_URL)


def redis_url_for_tests() -> str:
    return os.environ.get("HEADROOM_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)


# Tests construct Settings explicitly; a developer's own .env or HEADROOM_* must not leak in.
for _name in list(os.environ):
    if _name.startswith("HEADROOM_") and not _name.startswith("HEADROOM_TEST_"):
        del os.environ[_name]


# The directory says what a test needs: `pytest -m "not integration and not browser"` runs the
# unit tests on a machine without PostgreSQL, Redis or Chromium.
MARKERS_BY_DIRECTORY = {"integration": "integration", "browser": "browser"}
TESTS_DIR = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        directory = item.path.relative_to(TESTS_DIR).parts[0]
        marker = MARKERS_BY_DIRECTORY.get(directory)
        if marker is not None:
            item.add_marker(marker)
