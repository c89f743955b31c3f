"""Ingestion: durable, all-or-nothing, upstream-compatible; bad input is named and refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.samples.models import Sample, TargetCode
from backend.samples.repository import read_window
from backend.settings import Settings
from tests.factories import entry
from tests.integration.conftest import production_settings


@pytest.fixture(params=[0, 1], ids=["in-process", "helper-process"])
def settings(request: pytest.FixtureRequest, database_url: str) -> Settings:
    """Every case twice: stored by the API process itself (embedded mode, and production with
    `ingest.processes = 0`) and by a helper process (production's default): same answers."""
    return production_settings(database_url, ingest_processes=request.param)


def stored(engine: Engine) -> int:
    with Session(engine) as s:
        return s.scalar(select(func.count()).select_from(Sample)) or 0


def test_upstream_route_answers_202_with_upstream_message(
    client: TestClient, engine: Engine
) -> None:
    r = client.post("/add_training_data_bulk", json={"entries": [entry(), entry()]})
    assert r.status_code == 202
    assert r.json() == {"message": "Accepted 2 training samples."}
    assert stored(engine) == 2


def test_pool_scoped_upstream_route_stores_into_that_pool(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    assert client.post("/v1/pools", json={"name": "llama-70b"}).status_code == 201
    r = client.post("/pools/llama-70b/add_training_data_bulk", json={"entries": [entry()]})
    assert r.status_code == 202
    stats = client.get("/v1/samples/stats", params={"pool": "llama-70b"}).json()
    assert stats["targets"]["ttft"]["train"] + stats["targets"]["ttft"]["test"] == 1
    default = client.get("/v1/samples/stats").json()
    assert default["targets"]["ttft"]["buckets"] == []


def test_unknown_extra_fields_are_ignored_and_prediction_fields_kept(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    e = entry(some_future_field="x", predicted_ttft_ms=400.5, pod="vllm-0")
    assert client.post("/add_training_data_bulk", json={"entries": [e]}).status_code == 202
    with sessions() as s:
        row = s.scalars(select(Sample)).one()
    assert row.predicted_ms == 400.5
    assert row.pod == "vllm-0"
    assert row.latency_ms == 412.0
    assert row.observed_at.isoformat().startswith("2026-08-20T12:00:00.123456")


def test_entry_with_both_labels_feeds_both_windows(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    body = {
        "entries": [
            entry(actual_ttft_ms=300.0, actual_tpot_ms=0.0),
            entry(actual_ttft_ms=0.0, actual_tpot_ms=21.5),
            entry(actual_ttft_ms=250.0, actual_tpot_ms=19.0),
            entry(actual_ttft_ms=0.0, actual_tpot_ms=0.0),
        ]
    }
    r = client.post("/v1/samples", json=body)
    assert r.status_code == 200
    assert r.json() == {
        "pool": "default",
        "accepted": 4,
        "ttft_samples": 2,
        "tpot_samples": 2,
        "unlabelled": 1,
    }
    with sessions() as s:
        labels = sorted((t, v) for t, v in s.execute(select(Sample.target, Sample.latency_ms)))
    assert labels == [
        (TargetCode.TTFT, 250.0),
        (TargetCode.TTFT, 300.0),
        (TargetCode.TPOT, 19.0),
        (TargetCode.TPOT, 21.5),
    ]


def test_samples_acknowledged_survive_a_new_app_instance(
    settings: Settings, engine: Engine
) -> None:
    with TestClient(create_app(settings)) as first:
        for _ in range(3):
            assert first.post("/v1/samples", json={"entries": [entry()] * 100}).status_code == 200
    with TestClient(create_app(settings)) as second:
        stats = second.get("/v1/samples/stats").json()["targets"]["ttft"]
    assert stats["train"] + stats["test"] == 300


def _raw(body: bytes) -> Callable[[TestClient], Any]:
    return lambda c: c.post(
        "/v1/samples", content=body, headers={"content-type": "application/json"}
    )


BAD_BATCHES: dict[str, tuple[list[dict[str, Any]], int, str]] = {
    # name: (entries, index of the bad row, field named)
    "fraction above 1": ([entry(), entry(kv_cache_percentage=1.5)], 1, "kv_cache_percentage"),
    "negative fraction": ([entry(prefix_cache_score=-0.1)], 0, "prefix_cache_score"),
    "negative count": ([entry(), entry(), entry(num_request_waiting=-1)], 2, "num_request_waiting"),
    "negative latency": ([entry(actual_ttft_ms=-3)], 0, "actual_ttft_ms"),
    "missing field": (
        [entry(), {k: v for k, v in entry().items() if k != "input_token_length"}],
        1,
        "input_token_length",
    ),
    "string for a count": ([entry(num_request_running="many")], 0, "num_request_running"),
    "fractional count": ([entry(input_token_length=10.5)], 0, "input_token_length"),
    "count beyond int32": ([entry(input_token_length=2**40)], 0, "input_token_length"),
    "pod type not a string": ([entry(pod_type=3)], 0, "pod_type"),
    "pod type beyond a label value": ([entry(pod_type="p" * 64)], 0, "pod_type"),
    "NUL in a pod type": ([entry(), entry(pod_type="decode\x00")], 1, "pod_type"),
    "NUL in a pod name": ([entry(pod="pod-a\x00")], 0, "pod"),
    "newline in a pod class": ([entry(pod_class="H100\nx: 1")], 0, "pod_class"),
    "bad timestamp": ([entry(timestamp="yesterday")], 0, "timestamp"),
    "timestamp in year 1": ([entry(timestamp="0001-01-01T00:00:00Z")], 0, "timestamp"),
    "timestamp in year 9999": ([entry(timestamp="9999-12-31T23:00:00-05:00")], 0, "timestamp"),
    "matched above input": (
        [entry(encoder_input_size=10, encoder_matched_size=11)],
        0,
        "encoder_matched_size",
    ),
}


@pytest.mark.parametrize("route", ["/v1/samples", "/add_training_data_bulk"])
def test_bad_row_is_named_and_nothing_of_the_batch_is_stored(
    client: TestClient, engine: Engine, route: str
) -> None:
    # Every case against one app: a helper process costs about a second and a half to start,
    # and a refused batch changes nothing a later case could see (checked after each).
    for case, (entries, index, field) in BAD_BATCHES.items():
        r = client.post(route, json={"entries": entries})
        assert r.status_code == 422, (case, r.text)
        body = r.json()
        assert body["detail"].startswith(f"entries[{index}].{field}"), (case, body)
        assert {"index": index, "field": field} in [
            {"index": e["index"], "field": e["field"]} for e in body["errors"]
        ], (case, body)
        assert stored(engine) == 0, case


def test_nan_is_refused_with_row_and_field(client: TestClient, engine: Engine) -> None:
    good = orjson.dumps(entry()).decode()
    bad = orjson.dumps(entry()).decode().replace('"actual_ttft_ms":412.0', '"actual_ttft_ms":NaN')
    r = _raw(f'{{"entries":[{good},{bad}]}}'.encode())(client)
    assert r.status_code == 422
    assert r.json()["detail"].startswith("entries[1].actual_ttft_ms")
    assert stored(engine) == 0


def test_too_many_rows(client: TestClient, engine: Engine) -> None:
    r = client.post("/v1/samples", json={"entries": [entry()] * 10_001})
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == "entries"
    assert "10000" in r.json()["detail"]
    assert stored(engine) == 0


def test_empty_batch_is_refused_on_v1_and_accepted_upstream(client: TestClient) -> None:
    assert client.post("/v1/samples", json={"entries": []}).status_code == 422
    r = client.post("/add_training_data_bulk", json={"entries": []})
    assert r.status_code == 202
    assert r.json() == {"message": "Accepted 0 training samples."}


def test_invalid_json_and_wrong_shapes(client: TestClient, engine: Engine) -> None:
    assert _raw(b'{"entries": [')(client).status_code == 422
    assert client.post("/v1/samples", json={"entries": {"a": 1}}).status_code == 422
    assert client.post("/v1/samples", json=[entry()]).status_code == 422
    assert stored(engine) == 0


def test_unknown_pool_is_404_and_stores_nothing(client: TestClient, engine: Engine) -> None:
    r = client.post("/pools/nope/add_training_data_bulk", json={"entries": [entry()]})
    assert r.status_code == 404
    assert "nope" in r.json()["detail"]
    r = client.post("/v1/samples", params={"pool": "nope"}, json={"entries": [entry()]})
    assert r.status_code == 404
    assert stored(engine) == 0


def test_oversized_body_is_413_by_header_and_when_streamed(
    settings: Settings, engine: Engine
) -> None:
    small = settings.model_copy(
        update={"ingest": settings.ingest.model_copy(update={"max_body_bytes": 4096})}
    )
    body = orjson.dumps({"entries": [entry()] * 40})
    assert len(body) > 4096
    with TestClient(create_app(small)) as c:
        r = c.post("/v1/samples", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert "4096" in r.json()["detail"]

        def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(body), 1000):
                yield body[i : i + 1000]

        r = c.post("/v1/samples", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
        ok = c.post("/v1/samples", json={"entries": [entry()]})
        assert ok.status_code == 200
    assert stored(engine) == 1


def test_the_pods_progress_fields_are_stored_as_sent_and_default_to_zero(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    """Headroom's optional wire fields reach the window the trainer reads; a router that does
    not send them (upstream's EPP) stores 0; a bad value is named and stores nothing."""
    sent = entry(
        ms_since_last_token=12.5, oldest_prefill_wait_ms=80.25, ms_since_last_first_token=40
    )
    body = {"entries": [sent, entry(actual_ttft_ms=300.0)]}
    assert client.post("/add_training_data_bulk", json=body).status_code == 202
    with sessions() as s:
        window = read_window(s, 1, TargetCode.TTFT)
    order = np.argsort(window.labels)  # 300 ms (nothing sent), then 412 ms (sent)
    np.testing.assert_array_equal(window.cols["ms_since_last_token"][order], [0.0, 12.5])
    np.testing.assert_array_equal(window.cols["oldest_prefill_wait_ms"][order], [0.0, 80.25])
    np.testing.assert_array_equal(window.cols["ms_since_last_first_token"][order], [0.0, 40.0])
    for field in ("oldest_prefill_wait_ms", "ms_since_last_first_token"):
        r = client.post("/add_training_data_bulk", json={"entries": [entry(**{field: -1})]})
        assert r.status_code == 422
        assert field in r.text
