"""The EPP's data plane apart from everything else: its own port, and client networks.

An attacker on the EPP's network could replace a pool's model through the token-less
upstream routes; these tests hold the boundary that keeps them to the EPP.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from backend.app import create_app
from backend.settings import AuthSettings, Settings
from tests.factories import entry
from tests.server import free_port, headroom_process

EPP_NETWORK = "10.42.0.0/16"


def test_the_data_plane_port_serves_only_what_the_epp_calls(tmp_path: Path) -> None:
    data_port = free_port()
    env = {"HEADROOM_DATA_PLANE_PORT": str(data_port)}
    with headroom_process(env, tmp_path) as (url, _):
        epp = f"http://127.0.0.1:{data_port}"
        batch = {"entries": [entry()] * 20}
        assert httpx.post(f"{epp}/add_training_data_bulk", json=batch).status_code == 202
        assert (
            httpx.post(f"{epp}/pools/default/add_training_data_bulk", json=batch).status_code == 202
        )
        rows = {"requests": [entry()]}
        # No model yet: upstream's 503, not "no such route".
        assert httpx.post(f"{epp}/predict/bulk/strict", json=rows).status_code == 503
        for path in ("/healthz", "/readyz", "/status", "/pools/default/readyz", "/metrics"):
            assert httpx.get(f"{epp}{path}").status_code == 200, path
        for path in ("/v1/pools", "/v1/samples/stats", "/ui/login", "/docs", "/openapi.json"):
            r = httpx.get(f"{epp}{path}")
            assert r.status_code == 404, path
            assert "not served on the data-plane port" in r.json()["detail"]
        assert httpx.post(f"{epp}/v1/samples", json=batch).status_code == 404
        # The main port still serves everything (a network rule decides who reaches it).
        assert httpx.get(f"{url}/v1/pools").status_code == 200
        assert httpx.get(f"{url}/ui/login").status_code == 200
        stats = httpx.get(f"{url}/v1/samples/stats").json()["targets"]["ttft"]
        assert stats["train"] + stats["test"] == 40


@pytest.fixture
def fenced(settings: Settings) -> Iterator[Settings]:
    auth = AuthSettings(required=True, trust_upstream_routes=True, upstream_networks=[EPP_NETWORK])  # type: ignore[list-item]
    yield settings.model_copy(update={"auth": auth})


def _stored(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM samples")).scalar_one())


def test_a_client_outside_the_epp_network_is_refused_and_nothing_is_stored(
    fenced: Settings, engine: Engine
) -> None:
    batch = {"entries": [entry()] * 100}
    with TestClient(create_app(fenced), client=("192.168.7.9", 40000)) as outsider:
        for path in ("/add_training_data_bulk", "/pools/default/add_training_data_bulk"):
            r = outsider.post(path, json=batch)
            assert r.status_code == 403
            assert r.json()["detail"] == "client 192.168.7.9 is not in auth.upstream_networks"
        rows = {"requests": [entry()]}
        assert outsider.post("/predict/bulk/strict", json=rows).status_code == 403
        # The metrics follow the same trust: they name pools, versions and errors.
        assert outsider.get("/metrics").status_code == 403
        assert outsider.get("/pools/default/metrics").status_code == 403
        assert outsider.get("/healthz").status_code == 200
    assert _stored(engine) == 0
    with TestClient(create_app(fenced), client=("10.42.3.4", 40000)) as epp:
        assert epp.post("/add_training_data_bulk", json=batch).status_code == 202
        assert epp.get("/metrics").status_code == 200
    assert _stored(engine) == 100


def test_metrics_need_a_token_where_upstream_routes_do(settings: Settings) -> None:
    locked = settings.model_copy(
        update={"auth": AuthSettings(required=True, trust_upstream_routes=False)}
    )
    with TestClient(create_app(locked)) as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/pools/default/metrics").status_code == 401
        assert client.get("/healthz").status_code == 200
