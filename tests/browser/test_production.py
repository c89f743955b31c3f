"""Production mode: PostgreSQL, Redis and a Celery worker run the what-if; the API only reads
its progress from Redis (any replica could)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from playwright.sync_api import Browser, expect

from backend import migrate
from tests.browser.conftest import make_users, screenshot, sign_in
from tests.conftest import db_url_for_tests, redis_url_for_tests
from tests.pg import database_url_variant, recreate_database
from tests.server import headroom_process, headroom_worker

# Browser by its directory; integration too: it needs PostgreSQL and Redis.
pytestmark = pytest.mark.integration


@pytest.fixture
def production(tmp_path: Path) -> Iterator[str]:
    database_url = database_url_variant(db_url_for_tests(), "console")
    try:
        recreate_database(database_url)
    except Exception as exc:  # a clear message beats a stack of connection errors
        pytest.fail(f"PostgreSQL at {database_url} is not reachable: {exc}")
    migrate.upgrade(database_url)
    make_users(database_url)
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_REDIS_URL": redis_url_for_tests(),
        "HEADROOM_UI__WHATIF_REQUESTS": "200",
    }
    with headroom_worker(env, tmp_path, ()), headroom_process(env, tmp_path) as (url, _):
        yield url


def test_whatif_runs_as_a_celery_task_with_progress_in_redis(
    production: str, browser: Browser
) -> None:
    context = browser.new_context(base_url=production, viewport={"width": 1360, "height": 900})
    page = context.new_page()
    try:
        sign_in(page, "eddie")
        page.goto("/ui/policies")
        page.locator("#f-ttft_weight").fill("0.65")
        page.select_option("#f-strategy", "most")
        page.get_by_test_id("run-whatif").click()
        expect(page).to_have_url(re.compile(r"/ui/whatif/jobs/[0-9a-f]{32}$"))
        job_id = page.url.rsplit("/", 1)[1]
        expect(page.locator("#job")).to_have_attribute("data-status", "done", timeout=180_000)
        # The 11 outcome rows and each run's live prediction error beside what was knowable.
        expect(page.get_by_test_id("comparison").locator("tbody tr")).to_have_count(15)
        screenshot(page, "whatif-production")
        # The record the worker wrote is in Redis, where every API replica reads it.
        record = redis.Redis.from_url(redis_url_for_tests()).get(f"headroom:whatif:{job_id}")
        assert record is not None and b'"status": "done"' in record
    finally:
        context.close()
