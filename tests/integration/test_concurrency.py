"""Simultaneous writers against the real PostgreSQL: nobody's change is lost silently, and a
collision is a 409 that says what happened, never a 500."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.auth.models import SignInFailure
from backend.auth.service import create_user
from backend.db import unit_of_work
from backend.policies.models import PolicyVersion
from backend.settings import Settings
from tests.integration.test_security import PASSWORD, csrf_of

T = TypeVar("T")


def at_once(n: int, call: Callable[[int], T]) -> list[T]:
    """`n` calls released together by a barrier, each on its own thread (and so on its own
    connection of the app's pool): as simultaneous as a test can make them."""
    barrier = threading.Barrier(n)

    def run(i: int) -> T:
        barrier.wait()
        return call(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


@pytest.fixture
def wide(settings: Settings) -> Iterator[TestClient]:
    """An app whose database pool lets every simultaneous request hold a connection."""
    with TestClient(create_app(settings)) as c:
        yield c


def default_policy(client: TestClient) -> dict[str, object]:
    [policy] = client.get("/v1/policies").json()
    assert isinstance(policy, dict)
    return policy


def versions_of(sessions: sessionmaker[Session], policy_id: int) -> list[int]:
    with sessions() as session:
        return list(
            session.scalars(
                select(PolicyVersion.version)
                .where(PolicyVersion.policy_id == policy_id)
                .order_by(PolicyVersion.version)
            )
        )


def test_simultaneous_puts_all_apply_in_turn(
    wide: TestClient, sessions: sessionmaker[Session]
) -> None:
    policy_id = default_policy(wide)["id"]
    n = 12

    def put(i: int) -> Response:
        return wide.put(f"/v1/policies/{policy_id}", json={"ttft_weight": round(0.1 + i / 20, 2)})

    answers = at_once(n, put)
    assert [r.status_code for r in answers] == [200] * n, [r.text for r in answers]
    # Each writer waited for the row, so each made the next version: none collided.
    assert sorted(r.json()["version"] for r in answers) == list(range(2, n + 2))
    assert versions_of(sessions, policy_id) == list(range(1, n + 2))  # type: ignore[arg-type]


def test_a_stale_base_version_is_refused_with_the_current_version(client: TestClient) -> None:
    policy_id = default_policy(client)["id"]
    assert client.put(f"/v1/policies/{policy_id}", json={"ttft_weight": 0.5}).status_code == 200
    # Someone prepared a change on version 1; the policy is at version 2 now.
    stale = client.put(f"/v1/policies/{policy_id}", json={"ttft_weight": 0.9, "base_version": 1})
    assert stale.status_code == 409
    assert stale.json()["current_version"] == 2
    assert "version 2" in stale.json()["detail"]
    assert default_policy(client)["spec"]["ttft_weight"] == 0.5  # type: ignore[index]
    restore = client.post(
        f"/v1/policies/{policy_id}/restore", json={"version": 1, "base_version": 1}
    )
    assert restore.status_code == 409 and restore.json()["current_version"] == 2
    fresh = client.put(f"/v1/policies/{policy_id}", json={"ttft_weight": 0.9, "base_version": 2})
    assert fresh.status_code == 200 and fresh.json()["version"] == 3


def test_simultaneous_puts_and_restores_on_one_base_version_one_wins_the_rest_409(
    wide: TestClient, sessions: sessionmaker[Session]
) -> None:
    policy_id = default_policy(wide)["id"]
    assert wide.put(f"/v1/policies/{policy_id}", json={"ttft_weight": 0.5}).status_code == 200
    n = 16

    def write(i: int) -> Response:
        if i % 2:
            return wide.post(
                f"/v1/policies/{policy_id}/restore", json={"version": 1, "base_version": 2}
            )
        return wide.put(
            f"/v1/policies/{policy_id}", json={"ttft_weight": 0.2 + i / 100, "base_version": 2}
        )

    answers = at_once(n, write)
    codes = sorted(r.status_code for r in answers)
    assert codes == [200] + [409] * (n - 1), [r.text for r in answers]
    assert {r.json()["current_version"] for r in answers if r.status_code == 409} == {3}
    assert versions_of(sessions, policy_id) == [1, 2, 3]  # type: ignore[arg-type]


def test_simultaneous_creation_of_one_objective_makes_one_and_409s_the_rest(
    wide: TestClient,
) -> None:
    n = 16
    body = {"pool": "default", "name": "interactive", "priority": 10}
    answers = at_once(n, lambda _: wide.post("/v1/objectives", json=body))
    assert sorted(r.status_code for r in answers) == [201] + [409] * (n - 1), [
        r.text for r in answers
    ]
    assert all("already exists" in r.json()["detail"] for r in answers if r.status_code == 409)
    assert len(wide.get("/v1/objectives").json()) == 1


def test_simultaneous_objective_edits_and_a_delete_answer_200_204_or_404(
    wide: TestClient,
) -> None:
    created = wide.post("/v1/objectives", json={"pool": "default", "name": "batch", "priority": 1})
    objective_id = created.json()["id"]

    def write(i: int) -> Response:
        if i == 0:
            return wide.delete(f"/v1/objectives/{objective_id}")
        return wide.put(f"/v1/objectives/{objective_id}", json={"priority": i})

    answers = at_once(10, write)
    assert answers[0].status_code == 204
    assert {r.status_code for r in answers[1:]} <= {200, 404}
    assert wide.get(f"/v1/objectives/{objective_id}").status_code == 404


def test_forty_simultaneous_wrong_passwords_reach_the_check_at_most_five_times(
    client: TestClient, sessions: sessionmaker[Session], settings: Settings
) -> None:
    with unit_of_work(sessions) as session:
        create_user(session, "victim", PASSWORD, "admin")
    limit = settings.ui.sign_in_max_failures_per_user
    form = {
        "csrf_token": csrf_of(client),
        "username": "victim",
        "password": "a wrong guess",
        "next": "/ui/",
    }
    answers = at_once(40, lambda _: client.post("/ui/login", data=form, follow_redirects=False))
    codes = [r.status_code for r in answers]
    # A 401 is an answer from the password check; every other attempt was refused before it.
    assert codes.count(401) == limit, codes
    assert codes.count(429) == 40 - limit, codes
    with sessions() as session:
        recorded = session.scalar(
            select(func.count())
            .select_from(SignInFailure)
            .where(SignInFailure.username == "victim")
        )
    assert recorded == limit


def test_an_objective_edit_based_on_an_old_version_is_refused(client: TestClient) -> None:
    created = client.post("/v1/objectives", json={"pool": "default", "name": "chat", "priority": 5})
    assert created.json()["version"] == 1
    objective = f"/v1/objectives/{created.json()['id']}"
    first = client.put(objective, json={"priority": 7, "base_version": 1})
    assert first.status_code == 200 and first.json()["version"] == 2
    stale = client.put(objective, json={"description": "mine", "base_version": 1})
    assert stale.status_code == 409
    assert stale.json()["current_version"] == 2 and "priority 7" in stale.json()["detail"]
    assert client.get(objective).json()["description"] == ""
    # Without a base version, edits apply in turn (and still count).
    assert client.put(objective, json={"description": "ok"}).json()["version"] == 3
