"""Demo mode: `headroom serve --demo` fills the console within a minute, as the README says."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import screenshot, sign_in
from tests.server import headroom_process

DEMO_PASSWORD = "demo-password-for-tests"


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[str]:
    # Exactly the README's command, in an empty folder; the password is fixed for the test.
    with headroom_process({"HEADROOM_UI__DEMO_PASSWORD": DEMO_PASSWORD}, tmp_path, ("--demo",)) as (
        url,
        _,
    ):
        yield url


def test_demo_mode_trains_models_and_fills_the_console_within_a_minute(
    demo: str, browser: Browser
) -> None:
    started = time.monotonic()
    context = browser.new_context(base_url=demo, viewport={"width": 1360, "height": 900})
    page: Page = context.new_page()
    try:
        sign_in(page, "demo", DEMO_PASSWORD)
        # No reload: the Overview refreshes itself every 5 s (htmx) as models appear.
        for pool in ("default", "h100", "pd"):
            for target in ("ttft", "tpot"):
                version = page.locator(f"section[data-pool={pool}] tr[data-target={target}] a")
                remaining = max(1.0, 60 - (time.monotonic() - started))
                expect(version).to_have_text(re.compile(r"^v\d+$"), timeout=remaining * 1000)
        # The P/D pool's capacity signals per role: the saturation count at each tick, desired
        # replicas at the worker's first run (every 30 s).
        pd = page.locator("section[data-pool=pd]")
        split = re.compile(r"^\d+ prefill, \d+ decode$")
        expect(pd.get_by_test_id("saturation-role-replicas")).to_have_text(split)
        expect(pd.get_by_test_id("desired-split")).to_have_text(
            re.compile(r"^\(\d+ prefill \+ \d+ decode\)$"), timeout=60_000
        )
        screenshot(page, "demo-overview")
        page.goto("/ui/samples?pool=h100")
        expect(page.get_by_test_id("counts-ttft")).not_to_have_text("0 / 0")
        screenshot(page, "demo-samples")
        page.goto("/ui/objectives")
        expect(page.locator("tr[data-objective='batch-summaries']")).to_contain_text("sheddable")
        page.goto("/ui/models?pool=h100")
        # The demo's samples carry the served model's predictions: live error shows.
        expect(page.get_by_test_id("live-error")).to_contain_text("MAPE", timeout=30_000)
        screenshot(page, "demo-models")
        # Every 10th request also runs on a copy of its pod at dispatch: the live error against
        # what was knowable, from the first requests a model routed (Azure's pool, 22 requests
        # a second, has the 20 it needs within seconds of its first model).
        page.goto("/ui/models?pool=h100")
        knowable = page.get_by_test_id("knowable")
        for _ in range(30):  # the page does not refresh itself: reload until enough rows
            if knowable.count():
                break
            page.wait_for_timeout(2000)
            page.reload()
        expect(knowable).to_contain_text("what was knowable")
        screenshot(page, "demo-models-knowable")
    finally:
        context.close()
