"""What-if: simulate an edited policy against the active one, see the result, then save it."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in


def test_start_a_whatif_from_the_policy_form_and_save_its_policy(
    page: Page, console: Console
) -> None:
    before = console.policy()
    weight = 0.55 if before["spec"]["ttft_weight"] != 0.55 else 0.45
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    page.locator("#f-ttft_weight").fill(str(weight))
    page.select_option("#whatif-trace", "mooncake-conversation")
    page.get_by_test_id("run-whatif").click()

    expect(page).to_have_url(re.compile(r"/ui/whatif/jobs/[0-9a-f]{32}$"))
    expect(page.locator("ul.diff")).to_contain_text(f"ttft_weight: {before['spec']['ttft_weight']}")
    # htmx polls the run's progress and swaps the result in when it is done.
    job = page.locator("#job")
    expect(job).to_have_attribute("data-status", "done", timeout=180_000)
    table = page.get_by_test_id("comparison")
    expect(table.locator("tbody tr")).to_have_count(15)
    expect(table.locator("tbody tr").first).to_contain_text("SLO attainment")
    # Each run's live prediction error beside what was knowable at dispatch (n/a on this
    # short run: the floor is sampled after the first simulated minute).
    expect(table).to_contain_text("Live TTFT error (MAPE, %)")
    expect(table).to_contain_text("TTFT error knowable at dispatch (floor MAPE, %)")
    # Three plots, each drawn by Chart.js.
    expect(page.locator("canvas[data-chart]")).to_have_count(3)
    page.wait_for_function(
        "() => [...document.querySelectorAll('canvas[data-chart]')].every(c => Chart.getChart(c))"
    )
    screenshot(page, "whatif-result")
    # Nothing was saved by running it.
    assert console.policy()["version"] == before["version"]

    page.get_by_test_id("save-candidate").click()
    expect(page.locator(".flash")).to_have_text(f"Saved: policy version {before['version'] + 1}.")
    assert console.policy()["spec"]["ttft_weight"] == weight

    page.goto("/ui/whatif")
    expect(page.get_by_test_id("runs").locator("tbody tr").first).to_contain_text("done")
    screenshot(page, "whatif-runs")


def test_whatif_refuses_bad_values_like_the_policy_form(page: Page) -> None:
    sign_in(page, "eddie")
    page.goto("/ui/whatif")
    page.fill("#f-slo_buffer_factor", "11")
    page.get_by_test_id("start-whatif").click()
    expect(page.locator(".field[data-field=slo_buffer_factor] .error")).to_contain_text(
        "less than or equal to 10"
    )
