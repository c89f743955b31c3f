"""Metrics per route and per model, request ids, structured logs."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from backend.logs import JsonFormatter
from tests.factories import entry
from tests.integration.test_prediction import ingest, rows, runtime_of, train_and_load


def test_request_id_is_echoed_or_assigned(client: TestClient) -> None:
    r = client.get("/healthz", headers={"x-request-id": "req-42"})
    assert r.headers["x-request-id"] == "req-42"
    assigned = client.get("/healthz").headers["x-request-id"]
    assert len(assigned) == 32


def test_access_log_is_json_with_the_request_id(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="headroom.access"):
        client.post("/v1/samples", json={"entries": [entry()]}, headers={"x-request-id": "abc"})
    record = next(r for r in caplog.records if r.name == "headroom.access")
    line: dict[str, Any] = json.loads(JsonFormatter().format(record))
    assert line["request_id"] == "abc"
    assert line["route"] == "/v1/samples" and line["status"] == 200
    assert line["msg"] == "POST /v1/samples 200"


def test_metrics_per_route_rejections_and_models(client: TestClient) -> None:
    ingest(client, rows(300))
    train_and_load(client)
    client.post("/add_training_data_bulk", json={"entries": [entry(kv_cache_percentage=2)]})
    runtime_of(client).failures.incr("1:ttft")
    text = client.get("/metrics").text
    assert (
        'headroom_http_request_seconds_count{method="POST",route="/add_training_data_bulk",'
        'status="202"}' in text
    )
    assert 'headroom_ingest_rejected_batches_total{reason="invalid"} 1.0' in text
    assert 'headroom_active_model_version{pool="default",target="ttft"}' in text
    assert 'headroom_active_model_mape{pool="default",target="tpot"}' in text
    assert 'headroom_window_samples{pool="default",target="ttft"} 300.0' in text
    assert 'headroom_training_failures_total{pool_id="1",target="ttft"} 1.0' in text
