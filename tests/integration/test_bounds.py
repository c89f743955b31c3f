"""Every input bounded: what a client sends is answered with a 4xx naming the problem, never a
500, a process that grows by a gigabyte, or a connection held forever."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session, sessionmaker

from tests.factories import entry
from tests.integration.test_schedule import pod, policy_id
from tests.integration.test_security import make_user, signed_in
from tests.server import headroom_process


def _stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM samples")).scalar_one())


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00"])
def test_a_sample_from_the_edge_of_the_calendar_breaks_no_page(
    client: TestClient, engine: Engine, sessions: sessionmaker[Session], when: str
) -> None:
    for path in ("/add_training_data_bulk", "/v1/samples"):
        r = client.post(path, json={"entries": [entry(), entry(timestamp=when)]})
        assert r.status_code == 422
        assert r.json()["detail"].startswith("entries[1].timestamp: Value error, must be within")
    assert _stored(engine) == 0
    assert client.post("/v1/samples", json={"entries": [entry(timestamp=None)]}).status_code == 200
    make_user(sessions, "ops", "viewer")
    signed_in(client, "ops")
    for page in ("/ui/", "/ui/samples"):
        assert client.get(page).status_code == 200


def _schedule(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/v1/schedule", json=body)


def test_control_characters_are_refused_wherever_a_name_goes(client: TestClient) -> None:
    request = {"prompt_tokens": 100}
    cases = {
        "pool": {"pool": "default\x00", "request": request, "candidates": [pod("a")]},
        "candidates[0].name": {"request": request, "candidates": [pod("a\x00")]},
        "candidates[0].topology.zone": {
            "request": request,
            "candidates": [pod("a", topology={"zone": "z\x00"})],
        },
        "request.objective": {
            "request": {**request, "objective": "chat\x00"},
            "candidates": [pod("a")],
        },
    }
    for field, body in cases.items():
        r = _schedule(client, body)
        assert r.status_code == 422, field
        assert r.json()["detail"].startswith(field), r.json()
    # A pool name in a path: refused by its pattern, or unknown; never a database error.
    assert client.get("/pools/de%00fault/status").status_code == 422
    r = client.post("/pools/x%00/add_training_data_bulk", json={"entries": []})
    assert r.status_code == 422
    assert client.get("/v1/samples/stats", params={"pool": "de\x00fault"}).status_code == 404
    r = client.post("/v1/objectives", json={"pool": "default", "name": "x", "description": "\x00"})
    assert r.status_code == 422
    r = client.post("/v1/pools", json={"name": "p1", "description": "a\x00b"})
    assert r.status_code == 422
    assert client.post("/v1/pools", json={"name": "p1", "description": "a\nb"}).status_code == 201


def test_policy_numbers_have_physical_bounds(client: TestClient) -> None:
    pid = policy_id(client)
    for field, value in (
        ("kv_bytes_per_token", 2**64),
        ("transfer_same_host_gbps", 1e300),
        ("default_ttft_slo_ms", 1e12),
    ):
        r = client.put(f"/v1/policies/{pid}", json={field: value})
        assert r.status_code == 422, field
        assert r.json()["errors"][0]["field"] == field
    # The largest accepted KV size still decides P/D requests.
    largest = {"kv_bytes_per_token": 2**24, "pd_selection": "joint"}
    assert client.put(f"/v1/policies/{pid}", json=largest).status_code == 200
    pods = [pod("p", role="prefill"), pod("d", role="decode")]
    r = _schedule(client, {"request": {"prompt_tokens": 100_000}, "candidates": pods})
    assert r.status_code == 200, r.text


def test_schedule_has_an_element_budget(client: TestClient) -> None:
    slos = [50.0] * 10_000
    over = [pod(f"p{i}", running_tpot_slos_ms=slos) for i in range(26)]
    r = _schedule(client, {"request": {"prompt_tokens": 100}, "candidates": over})
    assert r.status_code == 422
    assert "budget of 250000" in r.json()["detail"]
    # Far over: refused before the parser allocates anything.
    huge = [pod(f"p{i}", running_tpot_slos_ms=slos) for i in range(101)]
    r = _schedule(client, {"request": {"prompt_tokens": 100}, "candidates": huge})
    assert r.status_code == 413
    assert "1000000 values" in r.json()["detail"]
    within = [pod(f"p{i}", running_tpot_slos_ms=slos) for i in range(25)]
    r = _schedule(client, {"request": {"prompt_tokens": 100}, "candidates": within})
    assert r.status_code == 200


def test_a_stalled_body_is_answered_408_and_its_connection_closed(tmp_path: Path) -> None:
    env = {"HEADROOM_INGEST__BODY_READ_TIMEOUT_S": "0.5"}
    with headroom_process(env, tmp_path) as (url, _):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(
                b"POST /add_training_data_bulk HTTP/1.1\r\nhost: x\r\n"
                b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n"
                b'{"entries": ['
            )
            answer = b""
            while chunk := sock.recv(4096):  # until the server closes the connection
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"connection: close" in answer.lower()
    assert b"request body not received within 0.5 s" in answer
