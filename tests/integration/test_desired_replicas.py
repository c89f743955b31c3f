"""Desired replicas end to end: an EPP's samples posted, the worker's job run, the number read
back from the REST field and the Prometheus gauge of an API process."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from backend.capacity import desired as desired_module
from backend.capacity.desired import history, recent_rows, refresh_all
from backend.capacity.models import DesiredReplicas, DesiredReplicasPoint
from backend.samples.models import Sample
from backend.settings import CapacitySettings
from backend.sim.fromsamples import (
    SampleRow,
    build_workload,
    current_load,
    forecast_load,
    record,
)
from backend.sim.replay import DEFAULT_SLO
from backend.sim.traces import load_trace
from backend.sim.traces.loader import Trace
from tests.console import sign_in_new_user
from tests.integration.test_capacity import post, set_slo
from tests.integration.test_prediction import runtime_of

GPU = "a100-llama3-8b"


@pytest.fixture(autouse=True)
def no_kept_calibration() -> None:
    desired_module._calibrations.clear()  # pool ids repeat from one test's database to the next


def epp_samples(
    seconds: float = 60.0, pods: int = 2, trace: Trace | None = None, pd: str | None = None
) -> list[dict[str, Any]]:
    """What an EPP posts for a minute of Azure code traffic (or ``trace``, ``seconds`` long) on
    two pods (or ``pods``, ``pd`` a P/D split of them), stamped as if it happened over the last
    minute, each request tagged with a prefix group."""
    if trace is None:
        trace = load_trace("azure-code").scaled(3.0).window(0.0, seconds)
    _, observations = record(trace, pods, GPU, "least-request", DEFAULT_SLO, pd=pd)
    start = datetime.now(UTC) - timedelta(seconds=seconds + 5)
    out = []
    for o in observations:
        entry = o.entry()
        entry["timestamp"] = (start + timedelta(seconds=o.time_s)).isoformat()
        entry["prefix_group"] = f"session-{o.rid % 5}"
        out.append(entry)
    return out


def test_the_job_computes_desired_replicas_served_as_field_and_gauge(
    client: TestClient,
) -> None:
    runtime = runtime_of(client)
    post(client, epp_samples())
    with runtime.sessions() as session:  # the optional group is stored with the sample
        groups = set(session.scalars(select(Sample.prefix_group)))
    assert groups == {f"session-{i}" for i in range(5)}

    # No SLO yet (upstream's default policy): nothing to keep, no number.
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 0
    runtime.capacity.refresh()
    body = client.get("/v1/pools/default/saturation").json()
    assert body["desired_replicas"] is None

    set_slo(client, 2000, 100)
    assert client.put("/v1/policies/1", json={"target_slo_attainment": 0.9}).status_code == 200
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1  # the worker's job
    runtime.capacity.refresh()  # each API process's tick reads the stored result
    body = client.get("/v1/pools/default/saturation").json()
    desired = body["desired_replicas"]
    assert desired["met"] is True
    assert desired["attainment"] >= desired["target"] == 0.9
    assert 1 <= desired["replicas"] <= 8
    assert desired["current_pods"] == 2
    # An aggregated pool: no split, no per-role series.
    assert (desired["prefill_replicas"], desired["decode_replicas"]) == (None, None)
    assert desired["current_prefill_pods"] is None
    assert desired["profile"] in {"a100-llama2-7b", "a100-llama3-8b", "h100-llama2-7b"}
    assert desired["requests"] > 20 and desired["simulations"] > 3
    assert datetime.fromisoformat(desired["computed_at"]) > datetime.now(UTC) - timedelta(minutes=1)

    metrics = client.get("/metrics").text
    line = next(ln for ln in metrics.splitlines() if ln.startswith("headroom_desired_replicas{"))
    assert 'variant_name="default"' in line and 'namespace="default"' in line
    assert float(line.rsplit(" ", 1)[1]) == desired["replicas"]

    # The Overview shows it beside the saturation level.
    sign_in_new_user(client, "ops", role="viewer")
    page = client.get("/ui/").text
    shown = re.search(r'data-testid="desired-replicas">(\d+)', page)
    assert shown is not None and int(shown.group(1)) == desired["replicas"]

    # The next run keeps the pod's calibration (most of the cost) and only bisects again.
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
    runtime.capacity.refresh()
    again = client.get("/v1/pools/default/saturation").json()["desired_replicas"]
    assert again["replicas"] == desired["replicas"]
    assert (again["profile"], again["scale"]) == (desired["profile"], desired["scale"])
    assert again["simulations"] < desired["simulations"]

    # Each run is kept for the Overview's chart, in the database: every API replica draws it.
    with runtime.sessions() as session:
        points = history(session, 1, datetime.now(UTC) - timedelta(hours=1))
    assert [p.replicas for p in points] == [desired["replicas"], again["replicas"]]
    assert all(p.current_pods == 2 for p in points)
    page = client.get("/ui/").text
    assert 'data-testid="desired-chart" data-points="2"' in page


def test_a_pd_pool_gets_a_count_per_role_as_field_gauge_and_overview(client: TestClient) -> None:
    """A P/D pool's samples (the TTFT sample from the prefill endpoint, the TPOT sample from
    the decode endpoint): the job stores how many of each role, the REST field and the per-role
    gauges serve them, the Overview shows the split."""
    runtime = runtime_of(client)
    post(client, epp_samples(pods=4, pd="2:2"))
    set_slo(client, 2000, 100)
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
    runtime.capacity.refresh()
    desired = client.get("/v1/pools/default/saturation").json()["desired_replicas"]
    assert (desired["current_pods"], desired["current_prefill_pods"]) == (4, 2)
    prefill, decode = desired["prefill_replicas"], desired["decode_replicas"]
    assert prefill >= 1 and decode >= 1 and prefill + decode == desired["replicas"]
    assert desired["attainment"] >= desired["target"]

    metrics = client.get("/metrics").text
    roles = {
        m.group(1): float(m.group(2))
        for m in re.finditer(
            r'^headroom_desired_role_replicas\{[^}]*role="(\w+)"[^}]*\} (\S+)$', metrics, re.M
        )
    }
    assert roles == {"prefill": prefill, "decode": decode}
    assert 'variant_name="default-prefill"' in metrics

    sign_in_new_user(client, "ops", role="viewer")
    page = client.get("/ui/").text
    assert f'data-testid="desired-split">({prefill} prefill + {decode} decode)' in page
    assert "4 pods, 2 of them prefill" in page


def test_a_policy_naming_its_pods_profile_calibrates_that_profile_alone(
    client: TestClient,
) -> None:
    """Without `gpu_profile` the calibration tries every shipped profile; naming one drops the
    kept pick (its cache key changes), calibrates that profile alone, for fewer simulations,
    and labels the gauge with it."""
    runtime = runtime_of(client)
    post(client, epp_samples())
    set_slo(client, 2000, 100)
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
    runtime.capacity.refresh()
    picked = client.get("/v1/pools/default/saturation").json()["desired_replicas"]
    r = client.put("/v1/policies/1", json={"gpu_profile": "h100-llama2-7b"})
    assert r.status_code == 200 and r.json()["spec"]["gpu_profile"] == "h100-llama2-7b"
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
    runtime.capacity.refresh()
    declared = client.get("/v1/pools/default/saturation").json()["desired_replicas"]
    assert declared["profile"] == "h100-llama2-7b"
    assert declared["simulations"] < picked["simulations"]
    kept = desired_module._calibrations[(1, "llm-d-322", ("h100-llama2-7b",))][1]
    assert {t["profile"] for t in kept.tried} == {"h100-llama2-7b"}
    metrics = client.get("/metrics").text
    line = next(ln for ln in metrics.splitlines() if ln.startswith("headroom_desired_replicas{"))
    assert 'accelerator_type="h100-llama2-7b"' in line


def test_a_target_out_of_bounds_is_a_422(client: TestClient) -> None:
    for bad in (0.2, 1.0, "high"):
        response = client.put("/v1/policies/1", json={"target_slo_attainment": bad})
        assert response.status_code == 422, response.text


def test_too_little_traffic_removes_the_stale_number(client: TestClient) -> None:
    runtime = runtime_of(client)
    set_slo(client, 2000, 100)
    post(client, epp_samples(seconds=3.0))  # a handful of requests
    with runtime.sessions() as session:
        pool_id = 1
        session.add(
            DesiredReplicas(
                pool_id=pool_id,
                replicas=9,
                met=True,
                attainment=1.0,
                target=0.95,
                current_pods=2,
                requests=100,
                rate_rps=1.0,
                profile=GPU,
                scale=1.0,
                calibration_error=0.1,
                simulations=10,
                cpu_s=1.0,
                policy_version=1,
                computed_at=datetime.now(UTC) - timedelta(minutes=5),
            )
        )
        # A run from beyond the history's reach (an hour by default) and a recent one.
        old = datetime.now(UTC) - timedelta(hours=2)
        recent = datetime.now(UTC) - timedelta(minutes=5)
        for at in (old, recent):
            session.add(
                DesiredReplicasPoint(
                    pool_id=pool_id,
                    computed_at=at,
                    replicas=9,
                    met=True,
                    attainment=1.0,
                    current_pods=2,
                )
            )
        session.commit()
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 0
    runtime.capacity.refresh()
    assert client.get("/v1/pools/default/saturation").json()["desired_replicas"] is None
    # No new point for a run without an estimate; the old one is pruned, the recent one kept.
    with runtime.sessions() as session:
        kept = history(session, pool_id, datetime.now(UTC) - timedelta(days=1))
    assert [p.computed_at for p in kept] == [recent]


def _replayed_rates(
    client: TestClient, samples: list[dict[str, Any]], rate: dict[str, float]
) -> tuple[float, float, list[SampleRow]]:
    """The rate the job stores (the one it replayed) at the lookback's mean and with ``rate``'s
    settings, and the rows it read."""
    runtime = runtime_of(client)
    set_slo(client, 2000, 100)
    post(client, samples)
    # model_copy skips the settings' validator: say both of the rate's choices here.
    mean_rate = runtime.settings.capacity.model_copy(update={"desired_lead_s": 0.0})
    asked = mean_rate.model_copy(update=rate)

    def stored_rate(settings: CapacitySettings) -> float:
        assert refresh_all(runtime.sessions, settings) == 1
        with runtime.sessions() as session:
            return session.scalars(select(DesiredReplicas.rate_rps)).one()

    by_mean, by_asked = stored_rate(mean_rate), stored_rate(asked)
    with runtime.sessions() as session:
        rows = recent_rows(session, 1, asked, datetime.now(UTC))
    return by_mean, by_asked, rows


def test_the_job_replays_at_the_current_rate_when_asked(client: TestClient) -> None:
    by_mean, by_now, rows = _replayed_rates(client, epp_samples(), {"desired_rate_window_s": 5.0})
    # The stored rate is the one replayed: the lookback's mean scaled by its last 5 s'
    # (read from the same rows the job read).
    load = current_load(rows, 5.0)
    assert load > 1.5  # the minute's arrivals crowd into its last seconds
    assert by_now == pytest.approx(by_mean * load)


def test_the_job_replays_at_the_forecast_rate_with_a_lead(client: TestClient) -> None:
    # 120 Azure code requests over a minute, arriving at 1 + t / 30 a second (1 to 3).
    n = np.arange(120, dtype=np.float64)
    at = 30.0 * (np.sqrt(1.0 + n / 15.0) - 1.0)  # t + t^2 / 60 = n
    rising = dataclasses.replace(load_trace("azure-code").head(120), arrival_s=at, tick_s=0.0)
    samples = epp_samples(60.0, trace=rising)
    by_mean, by_lead, rows = _replayed_rates(client, samples, {"desired_lead_s": 10.0})
    # The stored rate is the one replayed: the lookback's mean scaled by the forecast 10 s
    # ahead (read from the same rows the job read), well above the mean on this ramp.
    load = forecast_load(rows, 10.0)
    assert 1.2 < load < 2.0  # not at the clamp
    assert by_lead == pytest.approx(by_mean * load)


def test_the_policys_plateau_chooses_how_close_to_the_most_pods_the_count_aims(
    client: TestClient,
) -> None:
    # A 150 ms TTFT SLO at a 0.999 target: out of reach at any pod count, so the answer is
    # where more pods stop helping, and the pool's policy says how close to the most pods'
    # attainment that is.
    runtime = runtime_of(client)
    set_slo(client, 150, 100)
    assert client.put("/v1/policies/1", json={"target_slo_attainment": 0.999}).status_code == 200
    post(client, epp_samples())

    def stored(plateau: float) -> DesiredReplicas:
        response = client.put("/v1/policies/1", json={"desired_plateau": plateau})
        assert response.status_code == 200, response.text
        assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
        with runtime.sessions() as session:
            return session.scalars(select(DesiredReplicas)).one()

    close, loose = stored(0.0), stored(0.5)
    # Plateau 0: the fewest pods that attain what the most pods do.
    assert not close.met and close.attainment < 0.999
    # Plateau 0.5: the fewest within half of that, far fewer pods.
    assert loose.replicas < close.replicas
    assert close.attainment - 0.5 <= loose.attainment < close.attainment
    # The Overview says the count is where more pods stop helping, not a met target.
    runtime.capacity.refresh()
    sign_in_new_user(client, "ops", role="viewer")
    page = client.get("/ui/").text
    assert "out of reach" in page and "where more pods stop helping" in page
    # Out of its bounds it is refused, naming the field, and the stored plateau stays.
    for bad in (-0.01, 0.6, "wide"):
        response = client.put("/v1/policies/1", json={"desired_plateau": bad})
        assert response.status_code == 422 and "desired_plateau" in response.text
    assert client.get("/v1/policies/1").json()["spec"]["desired_plateau"] == 0.5


@pytest.mark.parametrize("shape", ["headroom", "upstream", "upstream-pd"])
def test_stored_samples_give_each_request_its_answers_length(
    client: TestClient, shape: str
) -> None:
    """The replay (desired replicas' and the advisor's) reads each answer's length from the
    pair of samples its EPP posted and the database stored. Headroom's samples differ in
    num_tokens_generated; upstream's TPOT sample also has prefix score 0 and KV and queue
    gauges refreshed at the end (docs/capacity.md); under P/D upstream posts a request's TTFT
    sample from its prefill pod and its TPOT sample from its decode pod."""
    runtime = runtime_of(client)
    trace = load_trace("mooncake-conversation").scaled(1.0).window(0.0, 60.0)
    trace = trace.select(trace.output_tokens > 1)  # each request posts both samples
    pd = shape == "upstream-pd"
    samples = epp_samples(trace=trace, pods=4, pd="2:2") if pd else epp_samples(trace=trace)
    if pd:  # two pods per request, two roles
        assert {s["pod_type"] for s in samples if s["actual_ttft_ms"] > 0} == {"prefill"}
        assert {s["pod_type"] for s in samples if s["actual_tpot_ms"] > 0} == {"decode"}
    for s in samples:
        s.pop("prefix_group")
        if shape != "headroom" and s["actual_tpot_ms"] > 0:
            s.update(
                num_tokens_generated=0,
                prefix_cache_score=0.0,
                kv_cache_percentage=min(1.0, s["kv_cache_percentage"] + 0.1),
                num_request_waiting=s["num_request_waiting"] + 1,
            )
    post(client, samples)
    with runtime.sessions() as session:
        rows = recent_rows(session, 1, runtime.settings.capacity, datetime.now(UTC))
    replay = build_workload(rows)
    ttft = sum(s["actual_ttft_ms"] > 0 for s in samples)
    tpot = sum(s["actual_tpot_ms"] > 0 for s in samples)
    assert len(replay.trace) == ttft > 100
    assert replay.paired_outputs == tpot == ttft  # every request is matched
    # Each length is the true one, give or take rounding and the stored time's precision.
    replayed, true = np.sort(replay.trace.output_tokens), np.sort(trace.output_tokens)
    assert np.abs(replayed - true).max() <= max(2, 0.01 * true.max())
    # The saturation level's live profile reads the same lengths from the same match.
    runtime.capacity.refresh()
    live = runtime.capacity._signals[1]
    assert tpot <= runtime.settings.capacity.profile_size  # every length kept
    kept = np.sort(np.array(live.output_tokens))
    assert kept.size == tpot and np.abs(kept - true).max() <= max(2, 0.01 * true.max())
