"""Editing a policy in the browser: validation, history, restore, the EPP config, CSRF."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import Console, screenshot, sign_in


def test_change_weighting_and_strategy_then_see_history_and_epp_config(
    page: Page, console: Console
) -> None:
    before = console.policy()
    old_weight = before["spec"]["ttft_weight"]
    new_weight = 0.6 if old_weight != 0.6 else 0.7
    new_strategy = "least" if before["spec"]["strategy"] == "most" else "most"
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    # The slider shows both numbers, and follows the thumb.
    split = page.get_by_test_id("weight-split")
    old_ttft = round(old_weight * 100)
    expect(split).to_have_text(f"TTFT {old_ttft} / TPOT {100 - old_ttft}")
    page.locator("#f-ttft_weight").fill(str(new_weight))
    ttft = round(new_weight * 100)
    expect(split).to_have_text(f"TTFT {ttft} / TPOT {100 - ttft}")
    page.select_option("#f-strategy", new_strategy)
    page.get_by_test_id("save-policy").click()

    expect(page.locator(".flash")).to_have_text(f"Saved: policy version {before['version'] + 1}.")
    after = console.policy()
    assert after["spec"]["ttft_weight"] == new_weight
    assert after["spec"]["strategy"] == new_strategy
    assert after["updated_by"] == "eddie"

    newest = page.get_by_test_id("history").locator("tbody tr").first
    expect(newest).to_contain_text(f"v{after['version']}")
    expect(newest).to_contain_text("eddie")
    expect(newest.locator("li", has_text="ttft_weight")).to_contain_text(
        f"{old_weight} → {new_weight}"
    )
    expect(newest.locator("li", has_text="strategy")).to_contain_text(
        f"{before['spec']['strategy']} → {new_strategy}"
    )
    screenshot(page, "policies-after-save")

    with page.expect_download() as info:
        page.get_by_test_id("epp-download").click()
    download = info.value
    assert download.suggested_filename == f"epp-config-default-v{after['version']}.yaml"
    yaml = Path(download.path()).read_text(encoding="utf-8")
    assert f"ttftWeight: {new_weight}" in yaml
    tpot = re.search(r"tpotWeight: ([0-9.]+)", yaml)
    assert tpot is not None and float(tpot.group(1)) == pytest.approx(1 - new_weight)
    assert f"headroomSelectionStrategy: {new_strategy}" in yaml
    assert f"policy version {after['version']}" in yaml


def test_bad_values_are_refused_with_a_message_next_to_each_field(
    page: Page, console: Console
) -> None:
    before = console.policy()
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    page.fill("#f-max_ttft_penalty_ms", "-5")
    page.fill("#f-epsilon_explore_neg", "lots")
    page.fill("#f-expected_output_tokens", "2.5")
    page.fill("#f-default_ttft_slo_ms", "0")
    page.get_by_test_id("save-policy").click()

    def error(field: str) -> str:
        return page.locator(f".field[data-field={field}] .error").inner_text()

    expect(page.get_by_role("alert").first).to_contain_text("Not saved: 4 fields")
    assert "greater than or equal to 0" in error("max_ttft_penalty_ms")
    assert "valid number" in error("epsilon_explore_neg")
    assert "valid integer" in error("expected_output_tokens")
    assert "greater than 0" in error("default_ttft_slo_ms")
    # What was typed stays, so it can be corrected.
    expect(page.locator("#f-epsilon_explore_neg")).to_have_value("lots")
    expect(page.locator(".field.has-error")).to_have_count(4)
    screenshot(page, "policies-validation")
    assert console.policy()["version"] == before["version"]


def test_restore_an_earlier_version(page: Page, console: Console) -> None:
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    if console.policy()["version"] == 1:  # this test may run alone: make a version to undo
        page.select_option("#f-picker", "best_fit")
        page.get_by_test_id("save-policy").click()
    before = console.policy()
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("tr[data-version='1'] button", has_text="Restore").click()
    expect(page.locator(".flash")).to_have_text(
        f"Restored version 1 as version {before['version'] + 1}."
    )
    newest = page.get_by_test_id("history").locator("tbody tr").first
    expect(newest).to_contain_text("restore")
    assert console.policy()["spec"]["ttft_weight"] == 0.8  # version 1: upstream's defaults


def test_a_post_without_a_valid_csrf_token_changes_nothing(
    page: Page, browser: Browser, console: Console
) -> None:
    before = console.policy()
    sign_in(page, "eddie")
    page.goto("/ui/policies")
    form = {k: str(v) for k, v in before["spec"].items() if v is not None}
    form["ttft_weight"] = "0.25"

    missing = page.request.post("/ui/policies/default/save", form=form, max_redirects=0)
    assert missing.status == 403
    assert "Nothing was changed" in missing.text()

    # Another session's token (as a cross-site page could obtain by signing in itself).
    other = browser.new_context(base_url=console.url)
    try:
        other_page = other.new_page()
        other_page.goto("/ui/login")
        foreign = other_page.locator("input[name=csrf_token]").first.input_value()
    finally:
        other.close()
    wrong = page.request.post(
        "/ui/policies/default/save", form={**form, "csrf_token": foreign}, max_redirects=0
    )
    assert wrong.status == 403
    header = page.request.post(
        "/ui/policies/default/save",
        form=form,
        headers={"X-CSRF-Token": "forged"},
        max_redirects=0,
    )
    assert header.status == 403
    assert console.policy()["version"] == before["version"]

    # The same request with the session's own token goes through: the token was the only
    # thing missing.
    token = page.locator("input[name=csrf_token]").first.input_value()
    ok = page.request.post(
        "/ui/policies/default/save", form={**form, "csrf_token": token}, max_redirects=0
    )
    assert ok.status == 303
    assert console.policy()["spec"]["ttft_weight"] == 0.25


def test_objectives_mark_sheddable_ones_and_validate(page: Page) -> None:
    sign_in(page, "eddie")
    page.goto("/ui/objectives")
    page.fill("#o-name", "Not A Name!")
    page.get_by_role("button", name="Create objective").click()
    expect(page.locator(".field.has-error .error")).to_contain_text("should match pattern")
    page.fill("#o-name", "batch-jobs")
    page.fill("#o-priority", "-5")
    page.fill("#o-description", "nightly summaries")
    page.get_by_role("button", name="Create objective").click()
    row = page.locator("tr[data-objective='batch-jobs']")
    expect(row).to_contain_text("sheddable")
    page.fill("#o-name", "chat")
    page.fill("#o-priority", "10")
    page.get_by_role("button", name="Create objective").click()
    expect(page.locator("tr[data-objective='chat']")).to_contain_text("kept")
    # Most critical first.
    names = page.locator("tr[data-objective]").evaluate_all(
        "rows => rows.map(r => r.dataset.objective)"
    )
    assert names.index("chat") < names.index("batch-jobs")
    screenshot(page, "objectives-after-create")


def test_roll_back_a_model(page: Page, console: Console) -> None:
    versions = console.api("/v1/models", pool="default", target="ttft", limit=100)
    older = next(v for v in versions if v["status"] != "active")
    sign_in(page, "eddie")
    page.goto("/ui/models?target=ttft")
    page.locator(f"tr[data-version='{older['id']}'] button", has_text="Activate").click()
    expect(page.locator(".flash")).to_have_text(
        f"Version {older['id']} is now the active TTFT model."
    )
    expect(page.get_by_test_id("active-version")).to_have_text(f"v{older['id']}")
    assert console.api(f"/v1/models/{older['id']}")["status"] == "active"
    expect(page).to_have_url(re.compile(r"target=ttft"))
