"""Tokens, scopes and roles on every write route; artifacts never go near pickle; console
sessions end server-side and sign-ins are rate-limited."""

from __future__ import annotations

import ast
import pickle
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.auth.models import SignInFailure, UiSession, User
from backend.auth.service import create_token, create_user, set_password
from backend.auth.sessions import COOKIE_NAME, purge_expired, sign_in, signed_in_user, utcnow
from backend.auth.throttle import record_failure
from backend.db import unit_of_work
from backend.periodic import periodic_job
from backend.predictor.artifacts import ArtifactError
from backend.predictor.regressors import load_model
from backend.settings import AuthSettings, Settings
from backend.tasks import create_celery

WRITE = {"POST", "PUT", "PATCH", "DELETE"}
OPEN = {"/healthz", "/readyz", "/metrics"}


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    strict = settings.model_copy(
        update={"auth": AuthSettings(required=True, trust_upstream_routes=False)}
    )
    with TestClient(create_app(strict)) as c:
        yield c


def token(sessions: sessionmaker[Session], user: str, role: str, scopes: list[str]) -> str:
    with unit_of_work(sessions) as session:
        u = create_user(session, user, "a long enough password", role)  # type: ignore[arg-type]
        _, clear = create_token(session, u, "t", scopes)
    return clear


def api_write_routes() -> list[tuple[str, str]]:
    """Every documented write route (the OpenAPI schema lists them all)."""
    routes = []
    for path, operations in create_app(Settings()).openapi()["paths"].items():
        if path in OPEN or path.startswith("/ui"):
            continue
        for method in {m.upper() for m in operations} & WRITE:
            for name, value in (
                ("pool", "default"),
                ("policy_id", "1"),
                ("version_id", "1"),
                ("objective_id", "1"),
                ("target", "ttft"),
            ):
                path = path.replace("{" + name + "}", value)
            routes.append((method, path))
    return sorted(routes)


def test_every_api_write_route_refuses_a_missing_or_bad_token(locked: TestClient) -> None:
    routes = api_write_routes()
    assert len(routes) >= 15  # ingestion, prediction, schedule, policies, objectives, models...
    for method, path in routes:
        r = locked.request(method, path, json={})
        assert r.status_code == 401, (method, path, r.status_code)
        r = locked.request(method, path, json={}, headers={"Authorization": "Bearer hr_forged"})
        assert r.status_code == 401, (method, path, r.status_code)


def test_scopes_and_roles_decide(locked: TestClient, sessions: sessionmaker[Session]) -> None:
    predict_only = {"Authorization": f"Bearer {token(sessions, 'epp', 'viewer', ['predict'])}"}
    ingest_only = {"Authorization": f"Bearer {token(sessions, 'feed', 'viewer', ['ingest'])}"}
    admin_ingest = {"Authorization": f"Bearer {token(sessions, 'ops', 'admin', ['ingest'])}"}
    entry = {
        "kv_cache_percentage": 0.1,
        "input_token_length": 10,
        "num_request_waiting": 0,
        "num_request_running": 0,
        "num_tokens_generated": 0,
        "prefix_cache_score": 0,
        "actual_ttft_ms": 5,
        "actual_tpot_ms": 0,
    }
    body = {"entries": [entry]}
    assert (
        locked.post("/add_training_data_bulk", json=body, headers=predict_only).status_code == 403
    )
    assert locked.post("/add_training_data_bulk", json=body, headers=ingest_only).status_code == 202
    assert locked.post("/v1/samples", json=body, headers=ingest_only).status_code == 200
    one = {"requests": [{k: v for k, v in entry.items() if not k.startswith("actual")}]}
    assert locked.post("/predict/bulk/strict", json=one, headers=ingest_only).status_code == 403
    assert locked.post("/predict/bulk/strict", json=one, headers=predict_only).status_code == 503
    # An admin's token without the admin scope cannot change policies.
    put = locked.put("/v1/policies/1", json={"strategy": "most"}, headers=admin_ingest)
    assert put.status_code == 403 and "admin scope" in put.json()["detail"]


def test_trusted_upstream_routes_stay_open_for_the_epp(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    trusting = settings.model_copy(update={"auth": AuthSettings(required=True)})
    with TestClient(create_app(trusting)) as c:
        r = c.post("/add_training_data_bulk", json={"entries": []})
        assert r.status_code == 202
        assert c.post("/v1/samples", json={"entries": []}).status_code == 401
        assert c.get("/v1/policies").status_code == 401


def test_artifacts_are_never_unpickled() -> None:
    with pytest.raises(ArtifactError):
        load_model(pickle.dumps({"kind": "hybrid"}))
    backend = Path(__file__).resolve().parents[2] / "backend"
    for path in backend.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not {"pickle", "joblib", "cloudpickle", "dill"} & {
                n.split(".")[0] for n in names
            }, path


# The console: server-side sessions and the sign-in rate limit, through HTTP on PostgreSQL.

PASSWORD = "correct-horse-battery"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


class Clock:
    """The console's clock, moved by the tests instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock(client: TestClient) -> Clock:
    clock = Clock()
    client.app.state.console.state.clock = clock  # type: ignore[attr-defined]
    return clock


def make_user(sessions: sessionmaker[Session], name: str, role: str = "admin") -> None:
    with unit_of_work(sessions) as session:
        create_user(session, name, PASSWORD, role)  # type: ignore[arg-type]


def csrf_of(client: TestClient, path: str = "/ui/login") -> str:
    match = CSRF_INPUT.search(client.get(path).text)
    assert match is not None
    return match.group(1)


def attempt(client: TestClient, user: str, password: str = PASSWORD) -> Response:
    form = {"csrf_token": csrf_of(client), "username": user, "password": password, "next": "/ui/"}
    return client.post("/ui/login", data=form, follow_redirects=False)


def signed_in(client: TestClient, user: str) -> None:
    response = attempt(client, user)
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/ui/"


def is_signed_in(client: TestClient) -> bool:
    response = client.get("/ui/", follow_redirects=False)
    if response.status_code == 303:
        assert response.headers["location"].startswith("/ui/login?next=")
        return False
    assert response.status_code == 200
    return True


def sign_out(client: TestClient) -> None:
    response = client.post(
        "/ui/logout", data={"csrf_token": csrf_of(client, "/ui/")}, follow_redirects=False
    )
    assert response.status_code == 303


def copy_of(client: TestClient, **kwargs: Any) -> TestClient:
    """Another browser (same app, same database) holding a copy of the session cookie."""
    other = TestClient(client.app, **kwargs)
    other.cookies.set(COOKIE_NAME, client.cookies[COOKIE_NAME])
    return other


def test_a_copied_session_cookie_is_refused_after_sign_out(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    signed_in(client, "ada")
    thief = copy_of(client)
    assert is_signed_in(thief)
    sign_out(client)
    assert not is_signed_in(client)
    assert not is_signed_in(thief)  # the row is gone: the copy names nothing
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(UiSession)) == 0


def test_a_session_expires_after_its_max_age(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock, settings: Settings
) -> None:
    make_user(sessions, "ada")
    signed_in(client, "ada")
    clock.advance(seconds=settings.ui.session_max_age_s - 1)
    assert is_signed_in(client)
    clock.advance(seconds=1)
    assert not is_signed_in(client)
    with unit_of_work(sessions) as session:  # the periodic purge removes the row
        assert purge_expired(session, clock(), settings) == (1, 0)


def test_a_password_change_ends_existing_sessions(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    signed_in(client, "ada")
    other = copy_of(client)
    with unit_of_work(sessions) as session:
        user = session.scalar(select(User).where(User.username == "ada"))
        assert user is not None
        set_password(session, user, "a-brand-new-password")
    assert not is_signed_in(client) and not is_signed_in(other)
    assert attempt(client, "ada").status_code == 401
    assert attempt(client, "ada", "a-brand-new-password").status_code == 303


def test_an_admin_signs_a_user_out_everywhere(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    make_user(sessions, "vera", "viewer")
    vera_laptop, vera_phone = TestClient(client.app), TestClient(client.app)
    signed_in(vera_laptop, "vera")
    signed_in(vera_phone, "vera")
    signed_in(client, "ada")
    page = client.get("/ui/admin").text
    assert re.search(r'data-testid="sessions-vera"><span class="small">2</span>', page)
    with sessions() as session:
        vera_id = session.scalar(select(User.id).where(User.username == "vera"))
    # Without the CSRF token nothing happens.
    refused = client.post(f"/ui/admin/users/{vera_id}/sign-out", follow_redirects=False)
    assert refused.status_code == 403
    assert is_signed_in(vera_laptop)
    # A viewer cannot do it.
    token = csrf_of(vera_laptop, "/ui/")
    forbidden = vera_laptop.post(
        f"/ui/admin/users/{vera_id}/sign-out", data={"csrf_token": token}, follow_redirects=False
    )
    assert forbidden.status_code == 403
    done = client.post(
        f"/ui/admin/users/{vera_id}/sign-out",
        data={"csrf_token": csrf_of(client, "/ui/admin")},
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert not is_signed_in(vera_laptop) and not is_signed_in(vera_phone)
    assert "vera signed out everywhere (2 sessions)." in client.get("/ui/admin").text
    assert is_signed_in(client)


def test_the_sixth_sign_in_for_a_user_is_refused_even_with_the_right_password(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    for _ in range(5):
        assert attempt(client, "ada", "wrong guess").status_code == 401
        clock.advance(seconds=1)
    refused = attempt(client, "ada")  # the right password, but locked: not even checked
    assert refused.status_code == 429
    assert "Too many failed sign-ins; try again in 15 minutes." in refused.text
    assert int(refused.headers["retry-after"]) == 15 * 60 - 5
    assert not is_signed_in(client)
    # Another address gets the same answer: the limit is on the name.
    assert attempt(TestClient(client.app, client=("192.0.2.50", 1)), "ada").status_code == 429
    clock.advance(seconds=15 * 60 - 6)
    assert attempt(client, "ada").status_code == 429
    clock.advance(seconds=1)  # the first failure leaves the window
    signed_in(client, "ada")


def test_a_successful_sign_in_clears_the_users_failures(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    for _ in range(4):
        assert attempt(client, "ada", "wrong guess").status_code == 401
    signed_in(client, "ada")
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(SignInFailure)) == 0
    # The count starts again: four more mistakes are still answered as mistakes.
    for _ in range(4):
        assert attempt(client, "ada", "wrong guess").status_code == 401
    assert attempt(client, "ada", "wrong guess").status_code == 401
    assert attempt(client, "ada").status_code == 429


def test_the_address_limit_refuses_every_name_from_that_address_only(
    client: TestClient, sessions: sessionmaker[Session], clock: Clock
) -> None:
    make_user(sessions, "ada")
    sprayer = TestClient(client.app, client=("198.51.100.7", 4000))
    for i in range(20):  # one guess each at many names: under every per-user limit
        assert attempt(sprayer, f"user-{i}", "wrong guess").status_code == 401
    refused = attempt(sprayer, "ada")
    assert refused.status_code == 429 and "retry-after" in refused.headers
    with sessions() as session:
        addresses = set(session.scalars(select(SignInFailure.client_ip)))
    assert addresses == {"198.51.100.7"}
    signed_in(TestClient(client.app, client=("203.0.113.9", 4000)), "ada")
    clock.advance(minutes=15)
    signed_in(sprayer, "ada")


def test_beat_purges_expired_sessions_and_failures_that_no_longer_count(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    celery = create_celery(settings)
    celery.loader.import_default_modules()  # the worker's tasks, as a worker's start loads them
    purge = periodic_job("purge-sign-ins").task
    assert celery.conf.beat_schedule["purge-sign-ins"]["task"] == purge
    make_user(sessions, "ada")
    now = utcnow()
    with unit_of_work(sessions) as session:
        ada = session.scalar(select(User).where(User.username == "ada"))
        assert ada is not None
        max_age = settings.ui.session_max_age_s
        live: dict[str, Any] = {}
        sign_in(session, live, ada, now=now, max_age_s=max_age)
        sign_in(session, {}, ada, now=now - timedelta(seconds=max_age + 1), max_age_s=max_age)
        record_failure(session, "ada", "192.0.2.1", now - timedelta(minutes=16))
        record_failure(session, "ada", "192.0.2.1", now - timedelta(minutes=1))
    # Run as the worker runs it (in this process: no broker needed).
    assert celery.tasks[purge].apply().get() == (1, 1)
    with sessions() as session:
        assert signed_in_user(session, live, utcnow()) is not None
        assert session.scalar(select(func.count()).select_from(SignInFailure)) == 1
