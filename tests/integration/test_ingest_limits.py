"""Ingestion rate limits per client address (Redis-backed in production mode)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.settings import IngestSettings, Settings
from backend.sim.entries import prediction_requests, training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

ROWS = sample_rows(200, np.random.default_rng(0), load_profile("a100-llama3-8b"))
BODY = {"entries": training_entries(ROWS)}  # 400 entries, about 130 kB


@pytest.fixture
def limited(settings: Settings) -> Iterator[TestClient]:
    # 200 kB a second over 2 s: one body passes, three in a row do not.
    ingest = IngestSettings(processes=0, client_bytes_per_s=100_000, client_window_s=2)
    app = create_app(settings.model_copy(update={"ingest": ingest}))
    # A fresh address per test: the counters live in Redis, shared with earlier tests.
    with TestClient(app, client=(f"10.9.{uuid.uuid4().int % 250}.1", 5000)) as c:
        yield c


def test_a_client_over_its_rate_gets_429_with_retry_after(limited: TestClient) -> None:
    answers = [limited.post("/add_training_data_bulk", json=BODY) for _ in range(3)]
    assert answers[0].status_code == 202
    refused = answers[-1]
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert "rate limit" in refused.json()["detail"]
    stats = limited.get("/v1/samples/stats").json()["targets"]["ttft"]
    stored = stats["train"] + stats["test"]
    assert stored == 200 * sum(a.status_code == 202 for a in answers)  # refused: nothing stored


def test_another_address_and_predictions_are_not_limited(limited: TestClient) -> None:
    while limited.post("/add_training_data_bulk", json=BODY).status_code == 202:
        pass
    other = TestClient(limited.app, client=("10.8.0.7", 5000))
    assert other.post("/add_training_data_bulk", json=BODY).status_code == 202
    # Prediction never consults the limiter: the limited client still gets its answers
    # (503 here only because no model is trained yet).
    body = {"requests": prediction_requests(ROWS)[:5]}
    assert limited.post("/predict/bulk/strict", json=body).status_code == 503


def test_the_429_is_documented_on_every_ingestion_route(limited: TestClient) -> None:
    # Clients generated from the schema (and its fuzzer) must expect it: found by schemathesis
    # when its large bodies came fast enough to cross the default limit.
    paths = limited.app.openapi()["paths"]  # type: ignore[attr-defined]
    for path in ("/add_training_data_bulk", "/pools/{pool}/add_training_data_bulk", "/v1/samples"):
        answer = paths[path]["post"]["responses"]["429"]
        assert "Retry-After" in answer["headers"]
