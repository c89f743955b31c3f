"""Sessions that were not issued by the server, or were signed out, are refused; tokens are
shown once."""

from __future__ import annotations

import base64
import json
import re
import sqlite3

from itsdangerous import TimestampSigner
from playwright.sync_api import Browser, BrowserContext, Page, expect

from backend.auth.sessions import COOKIE_NAME, SESSION_KEY
from tests.browser.conftest import Console, screenshot, sign_in


def _session_cookie(context: BrowserContext) -> dict[str, object]:
    return next(c for c in context.cookies() if c["name"] == COOKIE_NAME)  # type: ignore[return-value]


def _payload(cookie: dict[str, object]) -> dict[str, object]:
    payload, _, _ = str(cookie["value"]).rsplit(".", 2)
    data: dict[str, object] = json.loads(base64.b64decode(payload))
    return data


def test_a_forged_session_cookie_is_refused(
    page: Page, context: BrowserContext, browser: Browser, console: Console
) -> None:
    # The admin's session id, as if it had leaked (say, from a log).
    admin = browser.new_context(base_url=console.url)
    try:
        sign_in(admin.new_page(), "ada")
        admin_session = _payload(_session_cookie(admin))[SESSION_KEY]
    finally:
        admin.close()
    sign_in(page, "vera")  # a viewer...
    cookie = _session_cookie(context)
    _, timestamp, signature = str(cookie["value"]).rsplit(".", 2)
    data = _payload(cookie)
    # ...who edits her cookie to hold the admin's session, keeping the (now wrong) signature.
    data[SESSION_KEY] = admin_session
    forged = base64.b64encode(json.dumps(data).encode()).decode()
    context.add_cookies([{**cookie, "value": f"{forged}.{timestamp}.{signature}"}])  # type: ignore[list-item]
    page.goto("/ui/admin")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/admin"))

    # A cookie signed with some other key (say, a guessed default) is refused just the same.
    other = TimestampSigner("changethis").sign(base64.b64encode(json.dumps(data).encode()))
    context.add_cookies([{**cookie, "value": other.decode()}])  # type: ignore[list-item]
    page.goto("/ui/admin")
    expect(page).to_have_url(re.compile(r"/ui/login\?next=/ui/admin"))


def test_a_copied_cookie_is_refused_once_its_session_signs_out(
    page: Page, context: BrowserContext, browser: Browser, console: Console
) -> None:
    sign_in(page, "eddie")
    # Someone copies the session cookie into another browser: it works there...
    elsewhere = browser.new_context(base_url=console.url)
    try:
        elsewhere.add_cookies([_session_cookie(context)])  # type: ignore[list-item]
        other = elsewhere.new_page()
        other.goto("/ui/policies")
        expect(other.get_by_test_id("who")).to_have_text("eddie")
        # ...until eddie signs out in his own browser: the session is gone on the server.
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/ui/login$"))
        other.goto("/ui/policies")
        expect(other).to_have_url(re.compile(r"/ui/login\?next=/ui/policies"))
        expect(other.get_by_role("heading", name="Sign in")).to_be_visible()
        screenshot(other, "copied-cookie-after-sign-out")
    finally:
        elsewhere.close()


def test_session_cookie_is_http_only_and_scoped_to_the_console(
    page: Page, context: BrowserContext
) -> None:
    sign_in(page, "vera")
    cookie = _session_cookie(context)
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Lax"
    assert cookie["path"] == "/ui"
    assert page.evaluate("document.cookie") == ""


def test_admin_creates_a_token_that_is_shown_once_and_stored_hashed(
    page: Page, console: Console
) -> None:
    sign_in(page, "ada")
    page.goto("/ui/admin")
    page.fill("#t-name", "epp-staging")
    page.check("input[name=scopes][value=ingest]")
    page.check("input[name=scopes][value=predict]")
    page.get_by_role("button", name="Create token").click()
    shown = page.get_by_test_id("new-token")
    expect(shown).to_contain_text("shown this once")
    clear = page.locator(".token").inner_text().strip()
    assert clear.startswith("hr_")
    screenshot(page, "admin-new-token")

    page.goto("/ui/admin")
    expect(page.get_by_test_id("new-token")).to_have_count(0)
    assert clear not in page.content()
    expect(page.get_by_test_id("tokens")).to_contain_text(clear[:10])
    path = console.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT token_hash, scopes FROM api_tokens").fetchall()
    assert all(clear not in str(row) for row in rows)

    # Wrong input is refused with a message by the field.
    page.fill("#t-name", "no-scopes")
    page.get_by_role("button", name="Create token").click()
    expect(page.locator(".field.has-error .error")).to_contain_text("at least one of")


def test_admin_adds_a_user_who_can_then_sign_in(page: Page) -> None:
    sign_in(page, "ada")
    page.goto("/ui/admin")
    page.fill("#u-name", "olga")
    page.fill("#u-password", "short")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator(".field.has-error .error")).to_contain_text("At least 8 characters")
    page.fill("#u-password", "a-long-enough-password")
    page.select_option("#u-role", "editor")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator("tr[data-user='olga']")).to_contain_text("editor")
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "olga", "a-long-enough-password")
