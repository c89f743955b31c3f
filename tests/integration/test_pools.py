from __future__ import annotations

from fastapi.testclient import TestClient


def test_default_pool_exists_and_others_are_created(client: TestClient) -> None:
    assert [p["name"] for p in client.get("/v1/pools").json()] == ["default"]
    r = client.post("/v1/pools", json={"name": "qwen-480b", "description": "H200 x13"})
    assert r.status_code == 201
    assert r.json()["name"] == "qwen-480b"
    assert client.get("/v1/pools/qwen-480b").json()["description"] == "H200 x13"
    assert [p["name"] for p in client.get("/v1/pools").json()] == ["default", "qwen-480b"]


def test_duplicate_and_invalid_names_are_refused(client: TestClient) -> None:
    assert client.post("/v1/pools", json={"name": "a"}).status_code == 201
    dup = client.post("/v1/pools", json={"name": "a"})
    assert dup.status_code == 409
    assert "already exists" in dup.json()["detail"]
    bad = client.post("/v1/pools", json={"name": "Not A Name"})
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["field"] == "name"
    assert client.get("/v1/pools/missing").status_code == 404


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
