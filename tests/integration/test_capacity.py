"""Saturation end to end: samples posted as the EPP does, real models, the pool's policy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.capacity.service import CapacityMonitor
from backend.settings import Settings
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.console import sign_in_new_user
from tests.integration.test_prediction import runtime_of, train_and_load

PROFILE = load_profile("a100-llama3-8b")


def post(client: TestClient, entries: list[dict[str, Any]]) -> None:
    for i in range(0, len(entries), 5000):
        response = client.post("/add_training_data_bulk", json={"entries": entries[i : i + 5000]})
        assert response.status_code == 202, response.text


def traffic(n: int, pods: int, seed: int = 0, **kw: Any) -> list[dict[str, Any]]:
    entries = training_entries(sample_rows(n, np.random.default_rng(seed), PROFILE, **kw))
    for i, e in enumerate(entries):
        e["pod"] = f"pod-{(i // 2) % pods}"  # a TTFT and a TPOT sample per request
    return entries


def saturation_of(client: TestClient, pool: str = "default") -> dict[str, Any]:
    runtime_of(client).capacity.refresh()
    response = client.get(f"/v1/pools/{pool}/saturation")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def set_slo(client: TestClient, ttft_ms: float, tpot_ms: float) -> None:
    body = {"default_ttft_slo_ms": ttft_ms, "default_tpot_slo_ms": tpot_ms}
    response = client.put("/v1/policies/1", json=body)  # the default pool's policy
    assert response.status_code == 200, response.text


def test_saturation_waits_for_slos_and_a_model_then_reports_every_fresh_pod(
    client: TestClient,
) -> None:
    post(client, traffic(400, pods=4))
    stale = traffic(2, pods=1, seed=1)
    long_ago = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    for e in stale:
        e["pod"], e["timestamp"] = "pod-gone", long_ago
    post(client, stale)

    no_slo = saturation_of(client)  # upstream's default policy sets no SLO
    assert (no_slo["status"], no_slo["saturation"]) == ("no_slo", None)
    set_slo(client, 2000, 100)
    before = saturation_of(client)
    assert (before["status"], before["saturation"]) == ("no_model", None)

    train_and_load(client)
    body = saturation_of(client)
    assert body["status"] == "ok"
    assert 0.0 <= body["saturation"] <= 1.0
    assert [p["pod"] for p in body["pods"]] == ["pod-0", "pod-1", "pod-2", "pod-3"]
    assert body["stale_pods"] == ["pod-gone"]
    assert body["fresh_pods"] == 4
    assert body["representatives"] == 32
    assert body["headroom_p50"]["prompt_tokens"] <= body["headroom_p90"]["prompt_tokens"]


def test_saturation_follows_the_policy_slo(client: TestClient) -> None:
    post(client, traffic(400, pods=3))
    train_and_load(client)
    set_slo(client, 600_000, 5_000)
    relaxed = saturation_of(client)
    assert relaxed["saturation"] == 0.0 and relaxed["ttft_slo_ms"] == 600_000
    # Every request fits, and would on two pods: the count asks for one pod fewer.
    assert relaxed["saturation_replicas"] == 2
    set_slo(client, 0.001, 0.001)
    strained = saturation_of(client)
    assert strained["saturation"] == 1.0
    assert all(p["saturation"] == 1.0 for p in strained["pods"])
    # Every request misses even on idle pods: no pod count fixes that, so none is asked for
    # it (the count reads the misses load causes), and one pod fewer misses no more.
    assert strained["saturation_replicas"] == 2


def test_a_loaded_pool_asks_for_the_pods_its_load_costs(client: TestClient) -> None:
    """Pods whose newest gauges read deep queues miss a TTFT SLO that idle pods meet: the count
    adds the share of requests missing because of load, and the gauge exports it."""
    post(client, traffic(400, pods=4))
    set_slo(client, 2000, 100)
    train_and_load(client)
    calm = saturation_of(client)
    loaded = traffic(8, pods=4, seed=1)  # each pod's newest sample: a deep prefill queue
    for e in loaded:
        e.update(num_request_running=48, num_request_waiting=40, kv_cache_percentage=0.95)
        e.update(prefill_tokens_in_flight=120_000, decode_tokens_in_flight=40_000)
    post(client, loaded)
    body = saturation_of(client)
    assert body["status"] == "ok" and body["fresh_pods"] == 4
    assert body["present_saturation"] > calm["present_saturation"] + 0.05
    assert body["saturation_replicas"] > 4 >= calm["saturation_replicas"]
    text = client.get("/metrics").text
    assert (
        'headroom_saturation_replicas{accelerator_type="",namespace="default",pool="default",'
        f'variant_name="default"}} {float(body["saturation_replicas"])}'
    ) in text
    # The Overview shows it beside the level, with its ticks: the calm one's and this one's.
    sign_in_new_user(client, "ops", role="viewer")
    page = client.get("/ui/").text
    shown = re.search(r'data-testid="saturation-replicas">(\d+)', page)
    assert shown is not None and int(shown.group(1)) == body["saturation_replicas"]
    assert 'data-testid="saturation-replicas-chart"' in page
    # Headroom below zero reads as the miss it is (deep queues: the p90 request misses 2 s).
    assert body["headroom_p90"]["ttft_headroom_ms"] < 0
    assert re.search(r'TTFT <span class="worse">over by [\d,]+ ms</span>', page)
    # (The monitor's own timer may add ticks between the test's: each reads the state then.)
    counts = [c for _, c in runtime_of(client).capacity.count_history("default")]
    assert counts[-1] == body["saturation_replicas"]
    assert calm["saturation_replicas"] in counts[: counts.index(body["saturation_replicas"])]


def pd_pool_trained(client: TestClient) -> None:
    """Four pods, pod-0 and pod-1 prefill, pod-2 and pod-3 decode, with SLOs and models."""
    entries = traffic(400, pods=4)
    for e in entries:
        e["pod_type"] = "prefill" if e["pod"] in ("pod-0", "pod-1") else "decode"
    post(client, entries)
    set_slo(client, 2000, 100)
    train_and_load(client)


def test_a_pd_pool_asks_each_role_for_the_pods_its_own_load_costs(client: TestClient) -> None:
    """Under P/D the level reads a request's TTFT on its prefill pod and its TPOT on its
    decode pod; prefill pods with deep queues ask for prefill pods, not decode ones, in the
    field, the per-role gauge and the Overview."""
    pd_pool_trained(client)
    loaded = traffic(8, pods=2, seed=1)  # the prefill pods' newest samples: deep queues
    for e in loaded:
        e.update(pod_type="prefill", num_request_running=48, num_request_waiting=40)
        e.update(kv_cache_percentage=0.95, prefill_tokens_in_flight=120_000)
    post(client, loaded)
    body = saturation_of(client)
    assert body["status"] == "ok" and body["fresh_pods"] == 4
    levels = {p["pod"]: p["saturation"] for p in body["pods"]}
    assert min(levels["pod-0"], levels["pod-1"]) > max(levels["pod-2"], levels["pod-3"])
    assert body["present_saturation"] > 0.5  # the prefill pods' queues, read at the TTFT
    roles = body["saturation_role_replicas"]
    assert roles is not None and roles["prefill"] > 2 >= roles["decode"]
    # The pool's count is its Deployments' counts summed, not a pooled reading beside them.
    assert body["saturation_replicas"] == roles["prefill"] + roles["decode"]
    text = client.get("/metrics").text
    for role in ("prefill", "decode"):
        assert (
            'headroom_saturation_role_replicas{accelerator_type="",namespace="default",'
            f'pool="default",role="{role}",variant_name="default-{role}"}} {float(roles[role])}'
        ) in text
    sign_in_new_user(client, "ops", role="viewer")
    page = client.get("/ui/").text
    assert (
        f'data-testid="saturation-role-replicas">{roles["prefill"]} prefill, '
        f"{roles['decode']} decode<"
    ) in page


def test_a_pd_pools_decode_queue_asks_for_decode_pods(client: TestClient) -> None:
    """A decode pod with requests waiting for a place in its batch holds every first token it
    is handed, which neither model sees: the level reads the wait (timed with the pool's own
    answer length, from its TPOT samples) and the decode role asks for pods, not the prefill
    one."""
    pd_pool_trained(client)
    calm = saturation_of(client)
    queued = traffic(8, pods=2, seed=1)  # the decode pods' newest samples: a full batch, a queue
    for i, e in enumerate(queued):
        e.update(pod=f"pod-{2 + i % 2}", pod_type="decode", num_request_running=24)
        e.update(num_request_waiting=60, kv_cache_percentage=0.97)
    post(client, queued)
    body = saturation_of(client)
    assert body["status"] == "ok" and body["fresh_pods"] == 4
    assert body["saturation"] > calm["saturation"]
    roles = body["saturation_role_replicas"]
    assert roles is not None and roles["decode"] > 2 >= roles["prefill"]
    assert body["headroom_p50"]["ttft_headroom_ms"] < 0


def test_saturation_is_exported_for_the_autoscaler(client: TestClient) -> None:
    post(client, traffic(300, pods=2))
    set_slo(client, 2000, 100)
    train_and_load(client)
    level = saturation_of(client)["saturation"]
    text = client.get("/metrics").text
    assert f'headroom_pool_saturation{{pool="default"}} {float(level)}' in text
    assert 'headroom_pod_saturation{pod="pod-0",pool="default"}' in text
    assert 'headroom_pool_fresh_pods{pool="default"} 2.0' in text


def test_an_unknown_pool_is_404(client: TestClient) -> None:
    assert client.get("/v1/pools/nope/saturation").status_code == 404


@pytest.fixture
def replaying(settings: Settings) -> Iterator[TestClient]:
    """The level for the next interval alone: the last minute's arrivals replayed onto the
    pods, no weight on the present level."""
    window = settings.capacity.model_copy(update={"arrival_window_s": 60.0, "present_weight": 0.0})
    with TestClient(create_app(settings.model_copy(update={"capacity": window}))) as c:
        yield c


def _idle_burst(client: TestClient) -> dict[str, Any]:
    """400 requests that just arrived on 4 pods whose gauges read idle."""
    entries = traffic(400, pods=4)
    for e in entries:  # the pods' gauges as an idle pod's: nothing running, nothing waiting
        e.update(num_request_running=0, num_request_waiting=0, kv_cache_percentage=0.0)
        e.update(prefill_tokens_in_flight=0, decode_tokens_in_flight=0)
    post(client, entries)
    set_slo(client, 2000, 100)
    train_and_load(client)
    return saturation_of(client)


def test_by_default_the_level_is_the_next_intervals_with_the_present_one_beside_it(
    client: TestClient,
) -> None:
    capacity = runtime_of(client).settings.capacity
    assert (capacity.arrival_window_s, capacity.present_weight) == (120.0, 0.0)
    post(client, traffic(400, pods=4))  # gauges that vary: the models learn what load costs
    set_slo(client, 2000, 100)
    train_and_load(client)
    body = saturation_of(client)
    assert body["arrival_rate_rps"] == pytest.approx(400 / 120, rel=1e-6)  # the burst, replayed
    now, later = body["present_saturation"], body["next_interval_saturation"]
    assert later > now  # the burst queues on the pods
    assert body["saturation"] == later
    text = client.get("/metrics").text  # both parts as gauges beside the level
    assert f'headroom_pool_saturation_part{{part="present",pool="default"}} {float(now)}' in text
    assert (
        f'headroom_pool_saturation_part{{part="next_interval",pool="default"}} {float(later)}'
        in text
    )


@pytest.fixture
def mixing(settings: Settings) -> Iterator[TestClient]:
    window = settings.capacity.model_copy(update={"present_weight": 0.3})
    with TestClient(create_app(settings.model_copy(update={"capacity": window}))) as c:
        yield c


def test_a_present_weight_mixes_the_pods_as_they_stand_with_the_next_interval(
    mixing: TestClient,
) -> None:
    client = mixing
    entries = traffic(400, pods=4)
    post(client, entries)
    set_slo(client, 2000, 100)
    train_and_load(client)
    body = saturation_of(client)
    newest = {e["pod"]: e["num_request_running"] + e["num_request_waiting"] for e in entries}
    assert {p["pod"]: p["requests"] for p in body["pods"]} == newest  # as their gauges say
    now, later = body["present_saturation"], body["next_interval_saturation"]
    assert later > now
    assert body["saturation"] == pytest.approx(0.3 * now + 0.7 * later)


@pytest.fixture
def present_only(settings: Settings) -> Iterator[TestClient]:
    window = settings.capacity.model_copy(update={"arrival_window_s": 0.0})
    with TestClient(create_app(settings.model_copy(update={"capacity": window}))) as c:
        yield c


def test_with_no_window_the_level_is_the_pods_as_they_stand(present_only: TestClient) -> None:
    body = _idle_burst(present_only)
    assert body["arrival_rate_rps"] == 0.0 and body["next_interval_saturation"] is None
    assert body["saturation"] == body["present_saturation"]


def test_a_tick_sees_every_pod_however_many_samples_arrived(replaying: TestClient) -> None:
    client = replaying
    # 4,000 samples from 80 pods in one tick: more than the profile takes (512), and every
    # pod's newest gauges still arrive (aggregated per pod by the database).
    post(client, traffic(2000, pods=80))
    set_slo(client, 2000, 100)
    train_and_load(client)
    runtime = runtime_of(client)
    assert runtime.settings.capacity.profile_rows < 4000
    body = saturation_of(client)
    assert body["status"] == "ok"
    assert body["fresh_pods"] == 80
    assert len(body["pods"]) == 80
    # The next interval replays the pool's arrivals: all 2,000 requests arrived within the
    # last minute, though the tick read the TTFT rows of only some of them (each then stands
    # for the ones not read).
    assert body["arrival_rate_rps"] == pytest.approx(2000 / 60, rel=1e-6)


def test_the_level_replays_a_burst_the_pods_do_not_show_yet(replaying: TestClient) -> None:
    """Idle pods, but 400 requests just arrived: the next interval's level is computed on the
    pods holding the requests that burst leaves on them."""
    body = _idle_burst(replaying)
    assert body["arrival_rate_rps"] == pytest.approx(400 / 60, rel=1e-6)
    assert all(p["requests"] > 0 for p in body["pods"])  # the middle state holds some


def test_the_level_is_corrected_by_what_its_requests_then_measured(client: TestClient) -> None:
    """Each tick's level is kept and, once its requests have answered, checked against their
    samples; the error of the last minutes comes off the level served, the forecast beside it.
    Driven on the monitor's own clock: a tick before the requests arrived, one after."""
    runtime = runtime_of(client)
    start = datetime.now(UTC).replace(microsecond=0)
    # 200 requests over 100 s from start (fewer rows than a tick reads: none is left out).
    entries = traffic(200, pods=4)
    for i, e in enumerate(entries):
        e["timestamp"] = (start + timedelta(seconds=i * 0.5)).isoformat()
    set_slo(client, 2000, 100)
    clock = [start]
    monitor = CapacityMonitor(
        runtime.sessions,
        runtime.store,
        runtime.policy_cache.get,
        runtime.settings.capacity,
        clock=lambda: clock[0],
    )
    later = traffic(400, pods=4, seed=3)  # a model's data, timed beyond any check here
    for e in later:
        e["timestamp"] = (start + timedelta(seconds=500)).isoformat()
    post(client, later)
    train_and_load(client)
    clock[0] = start - timedelta(seconds=300)
    monitor.compute()  # reads them (cut to the newest rows, each TTFT one weighing more)
    post(client, entries[:20])  # read whole by the next tick: one request a row
    clock[0] = start - timedelta(seconds=200)
    before = monitor.compute()[0]["default"]
    assert before.status == "ok" and before.saturation is not None
    assert before.saturation.record_bias is None  # nothing measured yet
    post(client, entries[20:])
    clock[0] = start + timedelta(seconds=150)  # every request here arrived 50-150 s ago
    reports, at, _ = monitor.compute()
    after = reports["default"].saturation
    assert after is not None and after.record_bias is not None
    # Served as every tick is: REST, the gauges and the Overview carry the forecast beside it.
    runtime.capacity.publish(reports, at)
    body = client.get("/v1/pools/default/saturation").json()
    assert (body["saturation"], body["uncorrected_saturation"], body["record_bias"]) == (
        pytest.approx(after.level),
        pytest.approx(after.uncorrected_level),
        pytest.approx(after.record_bias),
    )
    forecast_level = float(after.uncorrected_level or 0.0)
    part = f'headroom_pool_saturation_part{{part="uncorrected",pool="default"}} {forecast_level}'
    assert part in client.get("/metrics").text
    sign_in_new_user(client, "ops", role="viewer")
    assert 'data-testid="saturation-record"' in client.get("/ui/").text
    # What the record measured, from the samples the service holds (those the window kept):
    # each target's share in [now - 300 s, now - 30 s] against the first tick's forecast.
    held = monitor._signals[1].outcomes()
    lo, hi = ((start + timedelta(seconds=x)).timestamp() for x in (-150, 120))
    ttft = held.ttft_ms[(held.ttft_at_s >= lo) & (held.ttft_at_s <= hi)]
    tpot = held.tpot_ms[(held.tpot_at_s >= lo) & (held.tpot_at_s <= hi)]
    assert ttft.size >= 50 and tpot.size >= 50
    forecast = before.saturation
    measured = forecast.meeting_slo * (
        np.mean(ttft <= 2000) / forecast.meeting_ttft * np.mean(tpot <= 100) / forecast.meeting_tpot
    )
    assert after.record_bias == pytest.approx(forecast.meeting_slo - min(1.0, measured))
    # Some requests missed what the forecast said all would meet: the level rises.
    assert np.mean(ttft <= 2000) < forecast.meeting_ttft
    assert after.record_bias > 0 and after.level > after.uncorrected_level
    assert after.uncorrected_level is not None
    assert after.meeting_slo == pytest.approx(
        min(1.0, max(0.0, 1.0 - after.uncorrected_level - after.record_bias))
    )
    # New SLOs: the old levels answered another question, and the record starts again.
    set_slo(client, 1500, 80)
    clock[0] += timedelta(seconds=5)
    again = monitor.compute()[0]["default"].saturation
    assert again is not None and again.record_bias is None


def test_the_served_level_carries_its_forecast_and_bias(client: TestClient) -> None:
    post(client, traffic(400, pods=4))
    set_slo(client, 2000, 100)
    train_and_load(client)
    body = saturation_of(client)  # the first tick: nothing checked yet
    assert body["status"] == "ok"
    assert body["uncorrected_saturation"] is None and body["record_bias"] is None
    assert 'part="uncorrected"' not in client.get("/metrics").text
