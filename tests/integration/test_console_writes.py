"""The console's writes through the shared services, and the smaller holes of issue 15: a stale
policy form, user names, bounded path ids, the password change, the activation's author, the
EPP export's comments, a 500's request id and connection, `headroom user create`."""

from __future__ import annotations

import gc
import http.client
import re
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import uvicorn
import yaml
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from backend import cli
from backend.app import create_app
from backend.auth.models import User
from backend.auth.service import create_token, create_user
from backend.db import unit_of_work
from backend.policies.models import Policy
from backend.policies.schemas import PolicySpec
from backend.registry.locks import RedisLocks
from backend.registry.models import ActiveModel
from backend.registry.trainer import Trainer
from backend.settings import AuthSettings, Settings, get_settings
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from backend.ui.forms import form_values
from tests.conftest import redis_url_for_tests
from tests.integration.test_security import PASSWORD, csrf_of, is_signed_in, signed_in
from tests.server import free_port

HUGE = "99999999999999999999"


def admin(sessions: sessionmaker[Session], name: str = "ada", role: str = "admin") -> None:
    with unit_of_work(sessions) as session:
        create_user(session, name, PASSWORD, role)


def policy_form(client: TestClient, base_version: int, **changes: str) -> dict[str, str]:
    form = {**form_values(PolicySpec()), **changes}
    return {
        **form,
        "csrf_token": csrf_of(client, "/ui/policies"),
        "base_version": str(base_version),
    }


def test_a_policy_form_opened_before_an_api_edit_is_refused_showing_that_edit(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    page = client.get("/ui/policies").text
    assert 'name="base_version" value="1"' in page
    # Someone else changes the policy through the API while the form is open.
    assert client.put("/v1/policies/1", json={"ttft_weight": 0.5}).status_code == 200
    stale = client.post(
        "/ui/policies/default/save",
        data=policy_form(client, 1, ttft_weight="0.9"),
        follow_redirects=False,
    )
    assert stale.status_code == 409
    assert "Not saved" in stale.text
    # The other person's change, and the value this user submitted (kept in the form).
    assert re.search(r"v2 by local.*ttft_weight.*0\.8.*0\.5", stale.text, re.S)
    assert 'value="0.9"' in stale.text
    assert 'name="base_version" value="2"' in stale.text
    [policy] = client.get("/v1/policies").json()
    assert policy["version"] == 2 and policy["spec"]["ttft_weight"] == 0.5
    # Saved again on top of version 2: accepted.
    saved = client.post(
        "/ui/policies/default/save",
        data=policy_form(client, 2, ttft_weight="0.9"),
        follow_redirects=False,
    )
    assert saved.status_code == 303
    [policy] = client.get("/v1/policies").json()
    assert policy["version"] == 3 and policy["spec"]["ttft_weight"] == 0.9


def test_a_restore_from_a_stale_page_is_refused(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    assert client.put("/v1/policies/1", json={"ttft_weight": 0.5}).status_code == 200
    assert client.put("/v1/policies/1", json={"ttft_weight": 0.6}).status_code == 200
    form = {"csrf_token": csrf_of(client, "/ui/policies"), "version": "1", "base_version": "2"}
    refused = client.post("/ui/policies/default/restore", data=form, follow_redirects=False)
    assert refused.status_code == 409
    assert "version 3" in refused.text
    assert client.get("/v1/policies").json()[0]["version"] == 3


@pytest.mark.parametrize("name", ["ev\x00e", "eve\nplugins: []", "x" * 64, " ", "-lead"])
def test_user_names_are_validated_once_for_the_console(
    client: TestClient, sessions: sessionmaker[Session], name: str
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    form = {
        "csrf_token": csrf_of(client, "/ui/admin"),
        "username": name,
        "password": "long enough password",
        "role": "viewer",
    }
    r = client.post("/ui/admin/users", data=form, follow_redirects=False)
    assert r.status_code == 422
    assert "letters, digits" in r.text
    token_form = {
        "csrf_token": csrf_of(client, "/ui/admin"),
        "user": name,
        "name": "t",
        "scopes": "admin",
    }
    assert client.post("/ui/admin/tokens", data=token_form).status_code == 422
    with sessions() as session:
        assert session.scalars(select(User.username)).all() == ["ada"]


def test_a_nul_byte_in_the_sign_in_name_is_a_wrong_name_not_a_500(client: TestClient) -> None:
    form = {"csrf_token": csrf_of(client), "username": "ad\x00a", "password": PASSWORD}
    r = client.post("/ui/login", data=form, follow_redirects=False)
    assert r.status_code == 401
    assert "Wrong username or password" in r.text


def test_console_and_api_path_ids_are_bounded(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    csrf = csrf_of(client, "/ui/admin")
    for path in (
        f"/ui/admin/users/{HUGE}",
        f"/ui/admin/users/{HUGE}/sign-out",
        f"/ui/admin/tokens/{HUGE}/revoke",
        f"/ui/models/{HUGE}/activate",
        f"/ui/objectives/{HUGE}/update",
        f"/ui/objectives/{HUGE}/delete",
    ):
        r = client.post(path, data={"csrf_token": csrf, "action": "disable"})
        assert r.status_code in (404, 422), (path, r.status_code)
        assert r.headers["content-type"].startswith("text/html")
    for method, path in (
        ("GET", f"/v1/policies/{HUGE}"),
        ("PUT", f"/v1/objectives/{HUGE}"),
        ("POST", f"/v1/models/{HUGE}/activate"),
        ("GET", f"/v1/models/{HUGE}"),
    ):
        r = client.request(method, path, json={})
        assert r.status_code in (404, 422), (path, r.status_code)


def test_changing_ones_password_ends_the_other_sessions(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    admin(sessions, "vera", "viewer")
    # Two browsers, on two replicas of the API: sessions are rows every replica reads.
    with TestClient(create_app(settings)) as laptop, TestClient(create_app(settings)) as phone:
        signed_in(laptop, "vera")
        signed_in(phone, "vera")
        csrf = csrf_of(laptop, "/ui/account")
        no_csrf = laptop.post("/ui/account/password", data={"password": "x" * 12})
        assert no_csrf.status_code == 403
        wrong = laptop.post(
            "/ui/account/password",
            data={"csrf_token": csrf, "current_password": "not it", "password": "n" * 12},
        )
        assert wrong.status_code == 422 and "current password is wrong" in wrong.text
        assert is_signed_in(phone)
        short = laptop.post(
            "/ui/account/password",
            data={"csrf_token": csrf, "current_password": PASSWORD, "password": "short"},
        )
        assert short.status_code == 422 and "At least 8 characters" in short.text
        changed = laptop.post(
            "/ui/account/password",
            data={"csrf_token": csrf, "current_password": PASSWORD, "password": "a new password"},
            follow_redirects=False,
        )
        assert changed.status_code == 303
        assert is_signed_in(laptop)
        assert not is_signed_in(phone)
        form = {"csrf_token": csrf_of(phone), "username": "vera", "password": "a new password"}
        assert phone.post("/ui/login", data=form, follow_redirects=False).status_code == 303


def test_an_activation_through_the_api_records_the_caller(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    with unit_of_work(sessions) as session:
        rita = create_user(session, "rita", PASSWORD, "editor")
        _, clear = create_token(session, rita, "ci", ["admin"])
    strict = settings.model_copy(update={"auth": AuthSettings(required=True)})
    profile = load_profile("a100-llama3-8b")
    headers = {"Authorization": f"Bearer {clear}"}
    with TestClient(create_app(strict)) as client:
        runtime = client.app.state.runtime  # type: ignore[attr-defined]
        locks = RedisLocks(redis_url_for_tests(), 60)
        trainer = Trainer(runtime.sessions, runtime.settings, locks, runtime.notifier)
        for seed in (0, 1):
            entries = training_entries(sample_rows(300, np.random.default_rng(seed), profile))
            stored = client.post("/v1/samples", json={"entries": entries}, headers=headers)
            assert stored.status_code == 200
            trainer.run_once()
        versions = client.get("/v1/models?target=ttft", headers=headers).json()
        inactive = next(v["id"] for v in versions if v["status"] != "active")
        r = client.post(f"/v1/models/{inactive}/activate", headers=headers)
        assert r.status_code == 200
    with sessions() as session:
        query = select(ActiveModel).where(ActiveModel.version_id == inactive)
        pointer = session.scalars(query).one()
    assert pointer.activated_by == "rita"


def test_the_epp_export_cannot_be_given_yaml_keys_through_a_name(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    # A name stored before names were validated (or by a future path that forgets to).
    with unit_of_work(sessions) as session:
        session.execute(update(Policy).values(updated_by="eve\ninjected: true\r\n#"))
    r = client.get("/v1/policies/1/epp-config")
    assert r.status_code == 200
    config = yaml.safe_load(r.text)
    assert "injected" not in config
    header = r.text.split("\n")[:3]
    assert all(line.startswith("#") for line in header)
    assert "'eve\\ninjected: true\\r\\n#'" in header[1]


@pytest.fixture
def served(settings: Settings) -> Iterator[str]:
    """The app with a route that fails like a bug would, served by a real uvicorn."""
    app = create_app(settings)

    def broken() -> dict[str, Any]:
        raise RuntimeError("a bug")

    app.add_api_route("/test-broken", broken)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.05)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def test_a_500_keeps_the_request_id_and_the_connection(served: str) -> None:
    host, port = served.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", "/test-broken", headers={"x-request-id": "trace-me"})
    broken = conn.getresponse()
    body = broken.read()
    assert broken.status == 500
    assert broken.getheader("x-request-id") == "trace-me"
    assert b'"detail"' in body and b"a bug" not in body
    # The same connection answers the next request: the server did not drop it.
    conn.request("GET", "/healthz")
    healthy = conn.getresponse()
    healthy.read()
    assert healthy.status == 200
    conn.close()


@pytest.mark.parametrize("name", ["x" * 64, "eve\ninjected: true"])
def test_user_create_refuses_a_bad_name_with_a_clear_error(
    database_url: str, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv("HEADROOM_DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(
            cli.app, ["user", "create", name, "--role", "viewer", "--password", "long enough pw"]
        )
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "letters, digits" in result.output
    assert "Traceback" not in result.output
    # The command disposes its engine: collected now, a connection it left open would raise
    # its ResourceWarning here (an error under the suite's filterwarnings), not in a later test.
    gc.collect()


def test_a_nul_byte_in_a_pool_name_is_an_unknown_pool(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    csrf = csrf_of(client, "/ui/policies")
    saved = client.post("/ui/policies/de%00fault/save", data={"csrf_token": csrf})
    assert saved.status_code == 404 and "unknown pool" in saved.text
    assert client.get("/ui/policies/de%00fault/epp-config").status_code == 404
    assert client.get("/v1/pools/de%00fault").status_code == 404
    assert client.get("/v1/objectives", params={"pool": "de\x00fault"}).status_code == 404


def test_an_objective_row_saved_after_an_api_edit_is_refused_saying_how_it_reads(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    admin(sessions)
    signed_in(client, "ada")
    created = client.post("/v1/objectives", json={"pool": "default", "name": "chat", "priority": 5})
    objective_id = created.json()["id"]
    assert 'name="base_version" value="1"' in client.get("/ui/objectives").text
    assert client.put(f"/v1/objectives/{objective_id}", json={"priority": 9}).status_code == 200
    form = {
        "csrf_token": csrf_of(client, "/ui/objectives"),
        "priority": "6",
        "description": "from a stale page",
        "base_version": "1",
    }
    stale = client.post(f"/ui/objectives/{objective_id}/update", data=form)
    assert stale.status_code == 409
    assert "changed since version 1" in stale.text and "priority 9" in stale.text
    assert client.get(f"/v1/objectives/{objective_id}").json()["priority"] == 9
