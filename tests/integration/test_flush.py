"""Resetting a pool's window: upstream's /flush and /data/status, /v1, the console, the audit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.settings import AuthSettings, Settings
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.integration.test_security import csrf_of, make_user, signed_in

PROFILE = load_profile("a100-llama3-8b")


def ingest(client: TestClient, n: int, path: str = "/add_training_data_bulk", **kw: Any) -> None:
    entries = training_entries(sample_rows(n, np.random.default_rng(n), PROFILE))
    for e in entries:
        e.update(kw)
    assert client.post(path, json={"entries": entries}).status_code == 202


def test_upstream_flush_empties_the_window_and_reports_upstreams_fields(
    client: TestClient,
) -> None:
    ingest(client, 400)
    status = client.get("/data/status").json()
    assert status["training_data"]["total_samples"] + status["test_data"]["total_samples"] == 800
    assert status["training_data"]["ttft_samples"] + status["test_data"]["ttft_samples"] == 400
    assert sum(status["bucket_distribution"].values()) == 800
    assert all(k.startswith("queue_") for k in status["bucket_distribution"])
    assert status["model_ready"] is False and status["last_retrain"] is None
    assert set(status["ensemble"]) >= {
        "ensemble_mode",
        "ttft_noqueue_samples",
        "tpot_queued_samples",
    }
    assert set(status["metrics"]) == {"ttft_scores_count", "tpot_scores_count"}

    r = client.post("/flush", json={"reason": "vLLM upgraded"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["reason"] == "vLLM upgraded"
    flushed = (
        body["ttft_training_samples_flushed"]
        + body["tpot_training_samples_flushed"]
        + body["ttft_test_samples_flushed"]
        + body["tpot_test_samples_flushed"]
    )
    assert flushed == 800
    after = client.get("/data/status").json()
    assert after["training_data"]["total_samples"] == after["test_data"]["total_samples"] == 0
    audit = client.get("/v1/samples/flushes").json()
    assert len(audit) == 1
    assert audit[0]["reason"] == "vLLM upgraded"
    assert audit[0]["ttft_removed"] == audit[0]["tpot_removed"] == 400
    assert "POST /flush from" in audit[0]["flushed_by"]


def test_upstream_flush_of_held_out_rows_only_and_an_empty_body(client: TestClient) -> None:
    ingest(client, 400)
    r = client.post("/flush", json={"flush_training_data": False})
    assert r.json()["ttft_training_samples_flushed"] == 0
    assert r.json()["ttft_test_samples_flushed"] > 0
    status = client.get("/data/status").json()
    assert status["test_data"]["total_samples"] == 0
    assert status["training_data"]["total_samples"] > 0
    assert client.post("/flush").json()["success"] is True  # upstream's body is optional
    assert client.get("/data/status").json()["training_data"]["total_samples"] == 0


def test_flush_per_pool_leaves_other_pools_alone(client: TestClient) -> None:
    assert client.post("/v1/pools", json={"name": "h100"}).status_code == 201
    ingest(client, 100)
    ingest(client, 50, path="/pools/h100/add_training_data_bulk")
    r = client.post("/pools/h100/flush", json={})
    assert r.status_code == 200
    assert client.get("/pools/h100/data/status").json()["training_data"]["total_samples"] == 0
    default = client.get("/data/status").json()
    assert default["training_data"]["total_samples"] + default["test_data"]["total_samples"] == 200
    assert client.post("/pools/nope/flush").status_code == 404
    assert client.get("/pools/nope/data/status").status_code == 404
    assert client.post("/flush", json={"flush_test_data": "maybe"}).status_code == 422


def test_v1_flush_takes_a_reason_and_can_keep_newer_rows(client: TestClient) -> None:
    old = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    ingest(client, 100, timestamp=old)
    ingest(client, 30)
    assert client.post("/v1/samples/flush", json={}).status_code == 422  # the reason is required
    cutoff = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    r = client.post("/v1/samples/flush", json={"reason": "new GPU type", "older_than": cutoff})
    assert r.status_code == 200, r.text
    record = r.json()
    assert record["ttft_removed"] == 100 and record["tpot_removed"] == 100
    assert record["reason"] == "new GPU type" and record["older_than"] is not None
    stats = client.get("/v1/samples/stats").json()["targets"]["ttft"]
    assert stats["train"] + stats["test"] == 30
    naive = client.post(
        "/v1/samples/flush", json={"reason": "x", "older_than": "2026-01-01T00:00:00"}
    )
    assert naive.status_code == 422 and "time zone" in naive.text


@pytest.fixture
def locked_down(settings: Settings) -> Settings:
    auth = AuthSettings(required=True, trust_upstream_flush=False)
    return settings.model_copy(update={"auth": auth})


def test_flush_can_require_a_token_while_ingestion_stays_open(locked_down: Settings) -> None:
    with TestClient(create_app(locked_down)) as c:
        ingest(c, 20)  # the EPP's route stays token-less
        assert c.post("/flush").status_code == 401
        assert c.post("/pools/default/flush").status_code == 401
        assert c.post("/v1/samples/flush", json={"reason": "x"}).status_code == 401


def test_an_editor_flushes_from_the_samples_page_and_a_viewer_cannot(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    ingest(client, 100)
    make_user(sessions, "ada", "editor")
    make_user(sessions, "vera", "viewer")
    viewer = TestClient(client.app)
    signed_in(viewer, "vera")
    page = viewer.get("/ui/samples").text
    assert "Flush window" not in page
    refused = viewer.post(
        "/ui/samples/flush",
        data={"csrf_token": csrf_of(viewer, "/ui/samples"), "reason": "x"},
        follow_redirects=False,
    )
    assert refused.status_code == 403
    signed_in(client, "ada")
    assert "Flush window" in client.get("/ui/samples").text
    without_csrf = client.post("/ui/samples/flush", data={"reason": "x"}, follow_redirects=False)
    assert without_csrf.status_code == 403
    done = client.post(
        "/ui/samples/flush?pool=default",
        data={"csrf_token": csrf_of(client, "/ui/samples"), "reason": "model swapped"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    page = client.get("/ui/samples").text
    assert "Flushed 200 samples from pool default." in page
    assert "model swapped" in page and "ada" in page
    assert client.get("/v1/samples/flushes").json()[0]["flushed_by"] == "ada"
