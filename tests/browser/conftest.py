"""Browser tests: Playwright for Python driving Debian's Chromium against a real `headroom serve`.

One server per test session (embedded mode: a SQLite file in a temporary folder, in-process
training every second), seeded through the upstream ingestion route with simulated samples
until every target has a few model versions. Users: an admin, an editor and a viewer.
Screenshots of every page land in `tests/browser/artifacts/` (git-ignored).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from backend import migrate
from backend.auth.service import create_user
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.server import headroom_process

ARTIFACTS = Path(__file__).parent / "artifacts"
PASSWORD = "correct-horse-battery"
USERS = {"ada": "admin", "eddie": "editor", "vera": "viewer"}
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Page loads and htmx swaps on a shared 2-core machine can be slow; a what-if takes seconds.
expect.set_options(timeout=20_000)


@dataclass(frozen=True)
class Console:
    url: str
    database_url: str
    folder: Path

    def api(self, path: str, **params: Any) -> Any:
        response = httpx.get(f"{self.url}{path}", params=params, timeout=10)
        response.raise_for_status()
        return response.json()

    def policy(self, pool: str = "default") -> dict[str, Any]:
        return next(p for p in self.api("/v1/policies") if p["pool"] == pool)


def chromium_path() -> str:
    found = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        pytest.fail("the browser tests need Debian's chromium: apt-get install chromium")
    return found


def seed(url: str, rounds: int, rows: int = 150, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    profile = load_profile("a100-llama3-8b")
    for _ in range(rounds):
        entries = training_entries(sample_rows(rows, rng, profile))
        response = httpx.post(f"{url}/add_training_data_bulk", json={"entries": entries})
        assert response.status_code == 202, response.text


def wait_for_versions(url: str, n: int, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        versions = httpx.get(f"{url}/v1/models", params={"limit": 100}).json()
        counts = {t: sum(1 for v in versions if v["target"] == t) for t in ("ttft", "tpot")}
        if min(counts.values()) >= n:
            return
        time.sleep(0.5)
    raise TimeoutError(f"fewer than {n} model versions per target after {timeout_s} s")


def make_users(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        with unit_of_work(make_sessionmaker(engine)) as session:
            for name, role in USERS.items():
                create_user(session, name, PASSWORD, role)  # type: ignore[arg-type]
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    folder = tmp_path_factory.mktemp("console")
    database_url = f"sqlite:///{folder / 'headroom.db'}"
    migrate.upgrade(database_url)
    make_users(database_url)
    env = {
        "HEADROOM_DATABASE_URL": database_url,
        "HEADROOM_TRAINING__INTERVAL_S": "1",
        # A short slice keeps a what-if to seconds; the mechanics are the same.
        "HEADROOM_UI__WHATIF_REQUESTS": "200",
        # The advisor's smallest useful search: the same rounds on a few dozen requests.
        "HEADROOM_ADVISOR__REQUESTS": "30",
        "HEADROOM_ADVISOR__SEEDS": "2",
        "HEADROOM_ADVISOR__SURVIVORS": "1",
        "HEADROOM_ADVISOR__FINALISTS": "1",
        # Desired replicas: runs often enough for the Overview's history to have points, on
        # samples posted once (kept in the lookback for the whole session), bisecting to 8.
        "HEADROOM_CAPACITY__DESIRED_INTERVAL_S": "10",
        "HEADROOM_CAPACITY__DESIRED_LOOKBACK_S": "3600",
        "HEADROOM_CAPACITY__DESIRED_MAX_REPLICAS": "8",
    }
    with headroom_process(env, folder) as (url, _):
        # Two rounds with a training in between: every target gets at least two versions,
        # so the Models page has something to roll back to.
        seed(url, 1, seed=1)
        wait_for_versions(url, 1)
        seed(url, 2, seed=2)
        wait_for_versions(url, 2)
        yield Console(url, database_url, folder)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Browser, console: Console) -> Iterator[BrowserContext]:
    context = browser.new_context(
        base_url=console.url, viewport={"width": 1360, "height": 900}, accept_downloads=True
    )
    yield context
    context.close()


@pytest.fixture
def page(context: BrowserContext) -> Iterator[Page]:
    page = context.new_page()
    errors: list[str] = []
    # A script error (or a Content-Security-Policy violation) fails the test that caused it.
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda msg: (
            errors.append(msg.text)
            if msg.type == "error" and "Content Security Policy" in msg.text
            else None
        ),
    )
    yield page
    assert errors == [], errors


def sign_in(page: Page, user: str, password: str = PASSWORD) -> None:
    page.goto("/ui/login")
    page.fill("#username", user)
    page.fill("#password", password)
    page.click("button[type=submit]")
    expect(page.get_by_test_id("who")).to_have_text(user)


def screenshot(page: Page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
