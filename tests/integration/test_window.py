"""The stratified window: bounded per bucket, newest kept, other buckets untouched."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from backend.db import unit_of_work
from backend.predictor.window import WindowSpec
from backend.samples.models import Sample, TargetCode
from backend.samples.service import trim_all_windows, trim_window
from backend.settings import WindowSettings
from tests.factories import entry

SPEC = WindowSpec.from_settings(WindowSettings())


def test_5000_entries_into_one_bucket_keep_the_newest_cap_and_spare_the_rest(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    other = [entry(kv_cache_percentage=0.05, prefix_cache_score=0.1, actual_ttft_ms=9.0)] * 7
    assert client.post("/v1/samples", json={"entries": other}).status_code == 200
    for batch in range(5):
        hot = [entry(actual_ttft_ms=float(batch * 1000 + i + 1)) for i in range(1000)]
        assert client.post("/add_training_data_bulk", json={"entries": hot}).status_code == 202

    with unit_of_work(sessions) as s:
        deleted = trim_all_windows(s, cap=500)
    assert deleted == 4500

    hot_bucket = SPEC.bucket(0.42, 0.875, 0)
    stats = client.get("/v1/samples/stats").json()["targets"]["ttft"]
    by_bucket = {b["bucket"]: b["train"] + b["test"] for b in stats["buckets"]}
    assert by_bucket == {hot_bucket: 500, SPEC.bucket(0.05, 0.1, 0): 7}
    with sessions() as s:
        kept = sorted(s.scalars(select(Sample.latency_ms).where(Sample.bucket == hot_bucket)))
    assert kept == [float(v) for v in range(4501, 5001)]  # the newest 500


def test_trim_is_per_target_and_per_pool(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    client.post("/v1/pools", json={"name": "b"})
    both = [entry(actual_ttft_ms=5.0, actual_tpot_ms=2.0)] * 30
    client.post("/v1/samples", json={"entries": both})
    client.post("/v1/samples", params={"pool": "b"}, json={"entries": both})
    with unit_of_work(sessions) as s:
        pool_id = s.scalar(select(Sample.pool_id).limit(1))
        assert pool_id is not None
        assert trim_window(s, pool_id, TargetCode.TPOT, cap=10) == 20
    stats = client.get("/v1/samples/stats").json()["targets"]
    assert stats["ttft"]["train"] + stats["ttft"]["test"] == 30
    assert stats["tpot"]["train"] + stats["tpot"]["test"] == 10
    other = client.get("/v1/samples/stats", params={"pool": "b"}).json()["targets"]
    assert other["tpot"]["train"] + other["tpot"]["test"] == 30


def test_stats_report_buckets_ranges_and_a_held_out_share(client: TestClient) -> None:
    entries = [
        entry(
            kv_cache_percentage=(i % 10) / 10,
            prefix_cache_score=0.5,
            num_request_waiting=(i // 10) % 5,
        )
        for i in range(2000)
    ]
    client.post("/v1/samples", json={"entries": entries})
    stats = client.get("/v1/samples/stats").json()
    assert stats["cap"] == 500
    ttft = stats["targets"]["ttft"]
    assert ttft["train"] + ttft["test"] == 2000
    # ~10 % held out: 200 expected, binomial sd ~13.
    assert 130 <= ttft["test"] <= 270
    first = next(b for b in ttft["buckets"] if b["bucket"] == SPEC.bucket(0.3, 0.5, 3))
    assert first["kv_range"] == [0.3, 0.4]
    assert first["prefix_range"] == [0.5, 0.75]
    assert first["queue_range"] == [3, 7]
    assert len(ttft["buckets"]) == 10 * 3  # 10 KV buckets x queue bands {0}, {1,2}, {3,4}


def test_a_rare_pod_class_keeps_its_samples_in_a_shared_bucket(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    busy = [entry(pod_class="a100", actual_ttft_ms=float(i + 1)) for i in range(900)]
    rare = [entry(pod_class="h100", actual_ttft_ms=1.0)] * 40
    client.post("/v1/samples", json={"entries": rare})
    client.post("/v1/samples", json={"entries": busy})
    with unit_of_work(sessions) as s:
        assert trim_all_windows(s, cap=500) == 400
    with sessions() as s:
        kept = dict(
            s.execute(select(Sample.pod_class, func.count()).group_by(Sample.pod_class)).all()
        )
    assert kept == {"a100": 500, "h100": 40}
