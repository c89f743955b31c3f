"""The Advisor panel: start advice, see its progress and ranking, apply the pick, see it in the
history and in the EPP config download; a viewer sees the result but cannot apply."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in


def test_advise_apply_the_pick_and_download_its_epp_config(page: Page, console: Console) -> None:
    before = console.policy()
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    # No samples yet: the pool's own traffic is offered but cannot be chosen, and says why.
    replay = page.locator("#advice-workload option[value=pool-replay]")
    expect(replay).to_be_disabled()
    expect(page.get_by_test_id("no-replay")).to_contain_text("own traffic cannot be replayed")
    page.select_option("#advice-workload", "azure-code")
    page.get_by_test_id("start-advice").click()

    expect(page).to_have_url(re.compile(r"/ui/policies/default/advice/[0-9a-f]{32}$"))
    advice_url = page.url
    # htmx polls the search's progress and swaps the ranking in when it is done.
    expect(page.locator("#advice")).to_have_attribute("data-status", "done", timeout=180_000)
    ranking = page.get_by_test_id("advice-ranking")
    expect(ranking.locator("tbody tr[data-kind=active]")).to_have_count(1)
    expect(ranking.locator("tbody tr[data-kind=reference]")).to_have_count(1)
    expect(ranking.locator("tbody tr[data-kind=schedule]").first).to_contain_text("/v1/schedule")
    page.wait_for_function(
        "() => [...document.querySelectorAll('canvas[data-chart]')].every(c => Chart.getChart(c))"
    )
    screenshot(page, "advice-result")
    assert console.policy()["version"] == before["version"]  # nothing saved by advising

    # Every candidate but the active policy and llm-d's shipped reference is a policy now,
    # whatever its chain (the predicted one, llm-d's default, load+prefix, LMetric): Apply on each.
    rows = ranking.locator("tbody tr")
    appliable = ranking.locator("tbody tr[data-kind=epp], tbody tr[data-kind=schedule]")
    expect(page.locator("button[data-testid^=apply-]")).to_have_count(appliable.count())
    assert appliable.count() == rows.count() - 2
    # The pick (the best EPP-expressible candidate) is applied, whichever chain it is.
    pick = ranking.locator("tbody tr.current")
    expect(pick).to_contain_text("pick")
    apply = pick.locator("button[data-testid^=apply-]")
    number = int((apply.get_attribute("data-testid") or "").removeprefix("apply-"))
    page.on("dialog", lambda dialog: dialog.accept())
    apply.click()
    version = before["version"] + 1
    expect(page.locator(".flash")).to_have_text(
        f"Applied candidate #{number}: policy version {version}."
    )
    newest = page.get_by_test_id("history").locator("tbody tr").first
    expect(newest).to_contain_text(f"v{version}")
    expect(newest).to_contain_text("eddie")
    applied = console.policy()
    assert applied["version"] == version

    with page.expect_download() as download:
        page.get_by_test_id("epp-download").click()
    text = Path(download.value.path()).read_text(encoding="utf-8")
    assert f"policy version {version}" in text
    config = yaml.safe_load(text)
    plugins = {p["type"]: p for p in config["plugins"]}
    spec = applied["spec"]
    if spec["chain"] == "llm-d-default":
        gate = plugins["prefix-cache-affinity-filter"]["parameters"]
        assert gate["affinityThreshold"] == spec["sticky_affinity_threshold"]
        assert gate["maxTokensInFlightPenalty"] == spec["max_tokens_in_flight_penalty"]
        assert "token-load-scorer" in plugins and "latency-scorer" not in plugins
    elif spec["chain"] == "load-prefix":
        [profile] = config["schedulingProfiles"]
        weights = {p["pluginRef"]: p.get("weight") for p in profile["plugins"]}
        assert weights["prefix-cache-scorer"] == spec["load_prefix_prefix_weight"]
    else:
        assert spec["chain"] == "predicted-latency"
        scorer = plugins["latency-scorer"]["parameters"]
        assert scorer["headroomSelectionStrategy"] == spec["strategy"]
        assert scorer["ttftWeight"] == spec["ttft_weight"]
    # The policy form shows the chain that was applied.
    page.goto("/ui/policies")
    expect(page.locator("#f-chain")).to_have_value(spec["chain"])

    # A viewer sees the ranking but no Apply, and no way to start advice.
    page.context.clear_cookies()
    sign_in(page, "vera")
    page.goto(advice_url)
    expect(page.get_by_test_id("advice-ranking")).to_be_visible()
    expect(page.locator("button[data-testid^=apply-]")).to_have_count(0)
    page.goto("/ui/policies")
    expect(page.get_by_test_id("advice-list")).to_contain_text("done")
    expect(page.get_by_test_id("start-advice")).to_have_count(0)


def test_upstream_preset_is_one_click_away(page: Page, console: Console) -> None:
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    # The server is shared by the session's tests: a weighting none of them sets makes this a
    # change whatever they left (a new pool's strategy is `most` already).
    page.select_option("#f-strategy", "most")
    page.locator("#f-ttft_weight").fill("0.65")
    page.get_by_test_id("save-policy").click()
    expect(page.locator(".flash")).to_contain_text("Saved")
    spec = console.policy()["spec"]
    assert (spec["strategy"], spec["ttft_weight"]) == ("most", 0.65)
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("preset-upstream").click()
    expect(page.locator(".flash")).to_contain_text("Preset upstream applied")
    spec = console.policy()["spec"]
    assert (spec["strategy"], spec["ttft_weight"]) == ("least", 0.8)
