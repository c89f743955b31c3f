"""Sign-in, every page of the console, and what each role may see."""

from __future__ import annotations

import re
import time

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in
from tests.integration.test_desired_replicas import epp_samples


def test_pages_need_a_signed_in_user(page: Page) -> None:
    page.goto("/ui/models?target=tpot")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/models"))
    screenshot(page, "login")
    page.fill("#username", "ada")
    page.fill("#password", "not-the-password")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    page.fill("#password", "correct-horse-battery")
    page.click("button[type=submit]")
    # Back where the user was going.
    expect(page).to_have_url(re.compile(r"/ui/models\?target=tpot$"))
    expect(page.locator("nav.tabs a.active")).to_have_text("TPOT")


def test_every_page_renders_for_an_admin(page: Page, console: Console) -> None:
    sign_in(page, "ada")
    pages = {
        "overview": ("/ui/", "Overview"),
        "models": ("/ui/models", "Models · default"),
        "models-tpot": ("/ui/models?target=tpot", "Models · default"),
        "samples": ("/ui/samples", "Samples · default"),
        "policies": ("/ui/policies", "Policy · default"),
        "objectives": ("/ui/objectives", "Objectives · default"),
        "whatif": ("/ui/whatif", "What-if · default"),
        "admin": ("/ui/admin", "Admin"),
    }
    for name, (path, heading) in pages.items():
        page.goto(path)
        expect(page.locator("h1")).to_have_text(heading)
        if name.startswith("models"):
            # Chart.js has drawn both charts (the canvases get a size when it does).
            expect(page.locator("canvas[data-chart]")).to_have_count(2)
            page.wait_for_function(
                "() => window.Chart && document.querySelectorAll"
                "('canvas[data-chart]').length === [...document.querySelectorAll"
                "('canvas[data-chart]')].filter(c => Chart.getChart(c)).length"
            )
        screenshot(page, name)
    page.goto("/ui/no-such-page")
    expect(page.get_by_test_id("error-detail")).to_have_text("Not Found")
    screenshot(page, "error-404")


def test_overview_shows_active_models_and_freshness(page: Page, console: Console) -> None:
    sign_in(page, "ada")
    pool = page.locator("section[data-pool=default]")
    for target in ("ttft", "tpot"):
        row = pool.locator(f"tr[data-target={target}]")
        expect(row.locator("a")).to_have_text(re.compile(r"^v\d+$"))
        expect(row).to_contain_text("%")  # held-out MAPE and bias
    expect(pool.get_by_test_id("rate")).not_to_have_text("0")
    # The saturation panel: a level, or why there is none (these samples name no pod).
    expect(pool.get_by_test_id("saturation")).to_contain_text("Saturation")


def test_overview_shows_desired_replicas_and_their_history(page: Page, console: Console) -> None:
    """A pool with SLOs and a minute of an EPP's samples: the worker's job (every 10 s here)
    stores desired replicas and a point per run; the Overview shows the number and the chart."""
    url = console.url
    response = httpx.post(f"{url}/v1/pools", json={"name": "scaled"}, timeout=10)
    assert response.status_code == 201, response.text
    policy = console.policy("scaled")
    slo = {"default_ttft_slo_ms": 2000, "default_tpot_slo_ms": 100, "target_slo_attainment": 0.9}
    response = httpx.put(f"{url}/v1/policies/{policy['id']}", json=slo, timeout=10)
    assert response.status_code == 200, response.text
    entries = epp_samples()
    response = httpx.post(
        f"{url}/pools/scaled/add_training_data_bulk", json={"entries": entries}, timeout=30
    )
    assert response.status_code == 202, response.text
    # Two runs of the job: the number, and a history of two points.
    deadline = time.monotonic() + 180
    desired = None
    while time.monotonic() < deadline:
        desired = console.api("/v1/pools/scaled/saturation")["desired_replicas"]
        if desired is not None and desired["simulations"] < 10:  # a run after the calibrating one
            break
        time.sleep(2)
    assert desired is not None, "no desired replicas within 3 minutes"

    sign_in(page, "vera")
    pool = page.locator("section[data-pool=scaled]")
    expect(pool.get_by_test_id("desired-replicas")).to_have_text(re.compile(r"^[1-8]$"))
    chart = pool.get_by_test_id("desired-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("polyline")).to_have_count(2)  # desired and the pods the replay saw
    # One read of the element (the page swaps itself every 5 s): a vertex per run on each line.
    points, vertices = chart.evaluate(
        "e => [Number(e.dataset.points),"
        " [...e.querySelectorAll('polyline')].map(p => p.getAttribute('points').split(' ').length)]"
    )
    assert points >= 2 and vertices == [points, points]
    screenshot(page, "overview-desired")


def test_samples_page_shows_window_counts(page: Page, console: Console) -> None:
    stats = console.api("/v1/samples/stats", pool="default")["targets"]
    sign_in(page, "vera")
    page.goto("/ui/samples")
    for target in ("ttft", "tpot"):
        counts = f"{stats[target]['train']} / {stats[target]['test']}"
        # Samples keep arriving only from the fixture, so the counts are the API's.
        expect(page.get_by_test_id(f"counts-{target}")).to_have_text(counts)
    # 5 queue bands x 2 targets, each a 10 (KV) x 4 (prefix) grid.
    expect(page.locator("table.heat")).to_have_count(10)
    expect(page.locator("table.heat").first.locator("tbody tr")).to_have_count(10)


def test_viewer_sees_everything_and_can_change_nothing(page: Page, console: Console) -> None:
    sign_in(page, "vera")
    expect(page.locator("header nav a", has_text="Admin")).to_have_count(0)
    page.goto("/ui/policies")
    expect(page.get_by_test_id("save-policy")).to_have_count(0)
    expect(page.get_by_test_id("run-whatif")).to_have_count(0)
    expect(page.locator("#f-ttft_weight")).to_be_disabled()
    expect(page.locator("form[action$='/restore']")).to_have_count(0)
    screenshot(page, "policies-viewer")
    page.goto("/ui/models")
    expect(page.get_by_role("button", name="Activate")).to_have_count(0)
    page.goto("/ui/objectives")
    expect(page.get_by_role("button", name="Create objective")).to_have_count(0)
    page.goto("/ui/admin")
    expect(page.get_by_test_id("error-detail")).to_contain_text("vera is a viewer")

    # Hidden controls are not the protection: the server refuses the viewer's POSTs, even with
    # a valid CSRF token from the viewer's own session.
    page.goto("/ui/policies")
    token = page.locator("input[name=csrf_token]").first.input_value()
    before = console.policy()
    form = {"csrf_token": token, **{k: str(v) for k, v in before["spec"].items() if v is not None}}
    form["ttft_weight"] = "0.3"
    response = page.request.post("/ui/policies/default/save", form=form, max_redirects=0)
    assert response.status == 403
    assert "editor or an admin" in response.text()
    version = console.api("/v1/models", limit=1)[0]["id"]
    response = page.request.post(
        f"/ui/models/{version}/activate", form={"csrf_token": token}, max_redirects=0
    )
    assert response.status == 403
    assert console.policy()["version"] == before["version"]


def test_sign_out_ends_the_session(page: Page) -> None:
    sign_in(page, "eddie")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/ui/login$"))
    page.goto("/ui/policies")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
