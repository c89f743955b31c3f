"""Shared fixtures. Integration tests use the real PostgreSQL and Redis named by
HEADROOM_TEST_DATABASE_URL / HEADROOM_TEST_REDIS_URL (defaults: the local servers)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy.engine import make_url

DEFAULT_TEST_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/headroom_test"
DEFAULT_TEST_REDIS_URL = "redis://127.0.0.1:6379/15"


def _xdist_worker() -> int | None:
    """The pytest-xdist worker's number (``gw3`` -> 3), None when tests run in one process."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name.removeprefix("gw")) if name.startswith("gw") else None


def db_url_for_tests() -> str:
    """Each xdist worker gets a database of its own (``<name>_gw<N>``): every integration
    test empties every table, so two workers sharing one would erase each other's rows."""
    url = make_url(os.environ.get("HEADROOM_TEST_DATABASE_URL", DEFAULT_TEST_DATABASE_URL))
    worker = _xdist_worker()
    if worker is not None:
        url = url.set(database=f"{url.database or 'headroom_test'}_gw{worker}")
    return url.render_as_string(hide_password=False)


def redis_url_for_tests() -> str:
    """Each xdist worker gets a Redis database of its own (the configured one, then the ones
    below it): the tests flush theirs and Celery's queues live there."""
    url = os.environ.get("HEADROOM_TEST_REDIS_URL", DEFAULT_TEST_REDIS_URL)
    worker = _xdist_worker()
    if worker is None:
        return url
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base - worker) % 16}"))


# Tests construct Settings explicitly; a developer's own .env or HEADROOM_* must not leak in.
for _name in list(os.environ):
    if _name.startswith("HEADROOM_") and not _name.startswith("HEADROOM_TEST_"):
        del os.environ[_name]
# The one setting the suite gives every Settings it builds: apps built in a test's process
# compute saturation when the test calls `capacity.refresh()`, not in a helper process behind
# its back (a spawn per app, too); test_capacity_helper runs the helper. Servers started as
# real processes get it too (tests/server.py) unless a test asks for the helper.
os.environ["HEADROOM_CAPACITY__HELPER_PROCESS"] = "false"


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
