"""The advisor over REST: start a search, follow its progress, apply a candidate as an audited
policy version (its EPP config follows), a 409 after an intervening edit, roles, bad input; the
Celery path; the upstream preset."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.capacity import desired as desired_module
from backend.capacity.desired import refresh_all
from backend.settings import AdvisorSettings, AuthSettings, Settings
from backend.whatif.jobs import RedisJobStore
from tests.conftest import redis_url_for_tests
from tests.integration.test_capacity import post, set_slo
from tests.integration.test_desired_replicas import epp_samples, no_kept_calibration  # noqa: F401
from tests.integration.test_policies import token_for
from tests.integration.test_prediction import runtime_of
from tests.server import headroom_worker

# Small enough to run in seconds: the search's shape (screen, confirm, held-out) is the same.
TINY = AdvisorSettings(
    requests=40,
    seeds=2,
    survivors=2,
    finalists=1,
    # A calibration routed by the learning predicted chain takes minutes here: the replays of
    # the predicted chain calibrate with desired replicas' router (the choice is unit-tested).
    learning_calibration_max_requests=0,
)


@pytest.fixture
def embedded(settings: Settings) -> Iterator[TestClient]:
    """The embedded mode (no Redis: the advice runs in a thread), tokens required."""
    local = settings.model_copy(
        update={"redis_url": None, "advisor": TINY, "auth": AuthSettings(required=True)}
    )
    with TestClient(create_app(local)) as c:
        yield c


def _wait(client: TestClient, url: str, headers: dict[str, str]) -> dict[str, Any]:
    seen: set[str] = set()
    for _ in range(600):  # a bound, not a timing claim: the loop ends as soon as it is done
        body: dict[str, Any] = client.get(url, headers=headers).json()
        seen.add(body["status"])
        if body["status"] in ("done", "failed"):
            body["seen"] = seen
            return body
        time.sleep(0.1)
    raise AssertionError(f"advice never finished: {body}")


def _advise(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    r = client.post("/v1/pools/default/advice", json={"workload": "azure-code"}, headers=headers)
    assert r.status_code == 202, r.text
    started = r.json()
    assert started["status"] in ("queued", "running", "done") and started["base_version"] == 1
    assert started["budget"]["requests"] == TINY.requests
    done = _wait(client, f"/v1/pools/default/advice/{started['id']}", headers)
    assert done["status"] == "done", done["message"]
    return done


def test_advice_ranks_on_held_out_parts_and_apply_makes_an_audited_version(
    embedded: TestClient, sessions: sessionmaker[Session]
) -> None:
    alice = token_for(sessions, "alice", "editor")
    done = _advise(embedded, alice)
    result = done["result"]
    assert result["workload"]["source"] == "shipped-trace"
    assert "not this pool's own traffic" in result["workload"]["label"]
    ranking = result["ranking"]
    means = [row["held_out"]["slo_attainment"]["mean"] for row in ranking]
    assert means == sorted(means, reverse=True)
    for row in ranking:
        s = row["held_out"]["slo_attainment"]
        assert s["min"] <= s["mean"] <= s["max"]
    kinds = {row["kind"] for row in ranking}
    assert {"active", "reference", "epp", "schedule"} <= kinds
    for row in ranking:
        if row["kind"] == "schedule":
            assert row["needs"] == "/v1/schedule" and row["epp_config"] is None
    # Budgeted: a few dozen simulations, every candidate screened once.
    assert len(result["screened"]) <= result["simulations"] <= 60

    pick = result["pick_appliable"]
    row = ranking[pick]
    policy_id = embedded.get("/v1/policies", headers=alice).json()[0]["id"]
    r = embedded.post(
        f"/v1/pools/default/advice/{done['id']}/apply", json={"candidate": pick}, headers=alice
    )
    assert r.status_code == 200, r.text
    applied = r.json()
    assert applied["version"] == 2 and applied["updated_by"] == "alice"
    for key, value in row["spec_changes"].items():
        assert applied["spec"][key] == value
    history = embedded.get(f"/v1/policies/{policy_id}/history", headers=alice).json()
    assert history[0]["version"] == 2 and history[0]["changed_by"] == "alice"
    # The EPP config export follows: it is the candidate's own.
    exported = embedded.get(f"/v1/policies/{policy_id}/epp-config", headers=alice).text
    config = yaml.safe_load(exported)
    assert row["kind"] == "epp" and config == yaml.safe_load(row["epp_config"])
    plugins = {p["type"]: p for p in config["plugins"]}
    chain = row["spec"]["chain"]
    assert applied["spec"]["chain"] == chain
    if chain == "llm-d-default":
        gate = plugins["prefix-cache-affinity-filter"]["parameters"]
        assert gate["affinityThreshold"] == row["spec"]["sticky_affinity_threshold"]
        assert "token-load-scorer" in plugins and "latency-scorer" not in plugins
    elif chain == "load-prefix":
        assert "queue-scorer" in plugins and "latency-scorer" not in plugins
    else:
        scorer = plugins["latency-scorer"]["parameters"]
        assert scorer["headroomSelectionStrategy"] == row["spec"]["strategy"]

    # Applying again: the advice was made against version 1, the policy is at 2 now.
    again = embedded.post(
        f"/v1/pools/default/advice/{done['id']}/apply", json={"candidate": pick}, headers=alice
    )
    assert again.status_code == 409 and again.json()["current_version"] == 2


def test_apply_saves_a_non_predicted_chain_and_schedule_runs_it(
    embedded: TestClient, sessions: sessionmaker[Session]
) -> None:
    """On this small Azure workload the ranking holds llm-d's default chain and LMetric (the
    Headroom-only finalist): both are policies now, and /v1/schedule routes with them."""
    alice = token_for(sessions, "alice", "editor")
    done = _advise(embedded, alice)
    ranking = done["result"]["ranking"]
    url = f"/v1/pools/default/advice/{done['id']}"
    policy_id = embedded.get("/v1/policies", headers=alice).json()[0]["id"]
    chains = {row["spec"]["chain"]: i for i, row in enumerate(ranking) if row["appliable"]}
    assert {"llm-d-default", "lmetric"} <= set(chains), [r["label"] for r in ranking]

    sticky = ranking[chains["llm-d-default"]]
    assert sticky["kind"] == "epp" and sticky["needs"] == "EPP config"
    r = embedded.post(f"{url}/apply", json={"candidate": chains["llm-d-default"]}, headers=alice)
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["chain"] == "llm-d-default" and r.json()["version"] == 2
    exported = embedded.get(f"/v1/policies/{policy_id}/epp-config", headers=alice)
    assert yaml.safe_load(exported.text) == yaml.safe_load(sticky["epp_config"])
    assert "# Chain: llm-d-default" in exported.text
    pods = [
        {**_pod("warm"), "prefix_cache_score": 0.95, "prefill_tokens_in_flight": 4000},
        {**_pod("cold"), "prefix_cache_score": 0.0, "prefill_tokens_in_flight": 0},
    ]
    body = {"request": {"prompt_tokens": 2000, "seed": 1}, "candidates": pods}
    decision = embedded.post("/v1/schedule", json=body, headers=alice).json()
    assert decision["policy_version"] == 2
    assert decision["decision"]["mode"] == "llm-d-default"
    assert decision["decision"]["chosen"] == "warm"  # sticky: 4,000 tokens is within the penalty

    # The Headroom-only LMetric row is a policy too (this advice was made against version 1,
    # so it is saved here as an edit of the same spec): it has no EPP config to export.
    lmetric = ranking[chains["lmetric"]]
    assert lmetric["kind"] == "schedule" and lmetric["needs"] == "/v1/schedule"
    assert lmetric["epp_config"] is None
    r = embedded.put(f"/v1/policies/{policy_id}", json=lmetric["spec"], headers=alice)
    assert r.status_code == 200, r.text
    assert r.json()["spec"]["chain"] == "lmetric" and r.json()["version"] == 3
    refused = embedded.get(f"/v1/policies/{policy_id}/epp-config", headers=alice)
    assert refused.status_code == 409 and "/v1/schedule" in refused.json()["detail"]
    decision = embedded.post("/v1/schedule", json=body, headers=alice).json()
    assert decision["decision"]["mode"] == "lmetric"
    # LMetric: the warm pod's 100 uncached tokens plus 4,000 pending x 1 in flight, against
    # 2,000 new tokens x 1 on the cold one.
    assert decision["decision"]["chosen"] == "cold"


def _pod(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kv_cache_percentage": 0.3,
        "input_token_length": 2000,
        "num_request_waiting": 0,
        "num_request_running": 1,
        "num_tokens_generated": 1,
        "prefix_cache_score": 0.0,
        "dispatched_requests": 1,
    }


def test_roles_and_bad_input(embedded: TestClient, sessions: sessionmaker[Session]) -> None:
    alice = token_for(sessions, "alice", "editor")
    viewer = token_for(sessions, "victor", "viewer")
    assert embedded.post("/v1/pools/default/advice", headers=viewer).status_code == 403
    workloads = embedded.get("/v1/advice/workloads", headers=viewer).json()
    assert workloads == ["pool-replay", "mooncake", "azure-code", "azure-code-mixed", "mooncake-pd"]
    bad = embedded.post("/v1/pools/default/advice", json={"workload": "nope"}, headers=alice)
    assert bad.status_code == 422 and "azure-code" in bad.text
    assert embedded.post("/v1/pools/nope/advice", headers=alice).status_code == 404
    assert embedded.get("/v1/pools/default/advice/not-an-id", headers=alice).status_code == 422
    missing = "0" * 32
    assert embedded.get(f"/v1/pools/default/advice/{missing}", headers=alice).status_code == 404
    done = _advise(embedded, alice)
    url = f"/v1/pools/default/advice/{done['id']}"
    # Viewers see the result but cannot apply it.
    assert embedded.get(url, headers=viewer).json()["result"] is not None
    assert embedded.post(f"{url}/apply", json={"candidate": 0}, headers=viewer).status_code == 403
    ranking = done["result"]["ranking"]
    out_of_range = embedded.post(f"{url}/apply", json={"candidate": len(ranking)}, headers=alice)
    assert out_of_range.status_code == 422
    not_policy = next(i for i, row in enumerate(ranking) if not row["appliable"])
    r = embedded.post(f"{url}/apply", json={"candidate": not_policy}, headers=alice)
    assert r.status_code == 422 and "not a Headroom policy" in r.text
    assert embedded.post(f"{url}/apply", json={"candidate": "x"}, headers=alice).status_code == 422


def test_upstream_preset_resets_routing_and_keeps_slos(
    embedded: TestClient, sessions: sessionmaker[Session]
) -> None:
    alice = token_for(sessions, "alice", "editor")
    policy_id = embedded.get("/v1/policies", headers=alice).json()[0]["id"]
    edited = embedded.put(
        f"/v1/policies/{policy_id}",
        json={
            "strategy": "most",
            "picker": "best_fit",
            "default_ttft_slo_ms": 800,
            "target_slo_attainment": 0.9,
            "desired_plateau": 0.05,
        },
        headers=alice,
    ).json()
    r = embedded.post(
        f"/v1/policies/{policy_id}/preset/upstream",
        json={"base_version": edited["version"]},
        headers=alice,
    )
    assert r.status_code == 200, r.text
    spec = r.json()["spec"]
    assert spec["strategy"] == "least" and spec["picker"] == "weighted_random"
    assert spec["default_ttft_slo_ms"] == 800
    # The capacity targets are the pool's, not the routing's: they stay too.
    assert (spec["target_slo_attainment"], spec["desired_plateau"]) == (0.9, 0.05)
    stale = embedded.post(
        f"/v1/policies/{policy_id}/preset/upstream", json={"base_version": 1}, headers=alice
    )
    assert stale.status_code == 409
    unknown = embedded.post(f"/v1/policies/{policy_id}/preset/nope", headers=alice)
    assert unknown.status_code == 404


def test_advice_runs_in_a_celery_worker(
    settings: Settings, database_url: str, tmp_path: Path
) -> None:
    redis.Redis.from_url(redis_url_for_tests()).flushdb()
    env = {"HEADROOM_DATABASE_URL": database_url, "HEADROOM_REDIS_URL": redis_url_for_tests()}
    # The budget is the API's, recorded in the job when it starts.
    budget = AdvisorSettings(requests=20, seeds=1, survivors=1, finalists=1)
    with TestClient(create_app(settings.model_copy(update={"advisor": budget}))) as client:
        started = client.post("/v1/pools/default/advice", json={"workload": "azure-code"}).json()
        assert started["status"] == "queued"
        with headroom_worker(env, tmp_path, args=()):
            done = _wait(client, f"/v1/pools/default/advice/{started['id']}", {})
    assert done["status"] == "done", done["message"]
    assert done["result"]["simulations"] > 0
    # The worker wrote it where every API replica reads it, apart from the what-ifs.
    assert RedisJobStore(redis_url_for_tests(), "advice").load(started["id"]) is not None
    assert RedisJobStore(redis_url_for_tests()).load(started["id"]) is None


@pytest.fixture
def open_embedded(settings: Settings) -> Iterator[TestClient]:
    """The embedded mode with no token required: an EPP posts samples as upstream's does."""
    local = settings.model_copy(update={"redis_url": None, "advisor": TINY})
    with TestClient(create_app(local)) as c:
        yield c


def test_pool_replay_is_the_default_on_a_pool_with_traffic(open_embedded: TestClient) -> None:
    client = open_embedded
    # 70 simulated seconds of two pods' traffic (264 requests: the trace's first burst), as an
    # EPP posts it, stamped as just observed.
    post(client, epp_samples(seconds=70.0))
    # No SLO to measure attainment against: the replay is refused, saying why, and the default
    # falls back to a shipped trace.
    refused = client.post("/v1/pools/default/advice", json={"workload": "pool-replay"})
    assert refused.status_code == 422 and "SLO" in refused.json()["detail"], refused.text
    fallback = client.post("/v1/pools/default/advice")
    assert fallback.status_code == 202 and fallback.json()["workload"] == "mooncake"

    set_slo(client, 2000, 100)
    r = client.post("/v1/pools/default/advice")  # no workload named: the pool's own traffic
    assert r.status_code == 202, r.text
    assert r.json()["workload"] == "pool-replay"
    done = _wait(client, f"/v1/pools/default/advice/{r.json()['id']}", {})
    assert done["status"] == "done", done["message"]
    workload = done["result"]["workload"]
    assert workload["source"] == "pool-replay"
    assert workload["label"].startswith("this pool's own traffic")
    assert "not this pool's own traffic" not in workload["label"]
    assert workload["pods"] == 2 and workload["slo"] == {"ttft_ms": 2000, "tpot_ms": 100}
    assert workload["held_out_parts"] == TINY.seeds
    assert workload["requests_per_part"] == TINY.requests
    replay = workload["replay"]
    assert replay["pods"] == 2 and replay["requests"] >= (TINY.seeds + 1) * TINY.requests
    assert replay["outputs_paired"] + replay["outputs_drawn"] == replay["requests"]
    # Every request of these answered in more than one token: each one's TPOT sample is
    # matched to its TTFT sample, none is drawn (backend/sim/pairing.py).
    assert replay["outputs_drawn"] == 0
    assert (
        f"{replay['outputs_drawn']} of {replay['requests']} output lengths drawn"
        in (workload["label"])
    )
    calibration = replay["calibration"]
    assert calibration["profile"] in workload["gpu"] and calibration["simulations"] > 3
    assert f"calibration error {calibration['error']:.3f}" in workload["label"]
    # A new pool's predicted chain past the replay size it is calibrated with (0 here):
    # desired replicas' router, and the label says so.
    assert calibration["router"] == "llm-d-322" and calibration["router_is_active_policy"] is False
    assert "learns online" in calibration["router_fallback"]
    assert "routed by llm-d-322, not the pool's active policy" in workload["label"]
    ranking = done["result"]["ranking"]
    means = [row["held_out"]["slo_attainment"]["mean"] for row in ranking]
    assert means == sorted(means, reverse=True)
    assert {"active", "reference", "epp"} <= {row["kind"] for row in ranking}
    assert done["result"]["pick_appliable"] is not None

    # The desired-replicas job and the next replay reuse the pool's calibration.
    again = client.post("/v1/pools/default/advice", json={"workload": "pool-replay"})
    second = _wait(client, f"/v1/pools/default/advice/{again.json()['id']}", {})
    assert second["status"] == "done", second["message"]
    assert second["result"]["workload"]["replay"]["calibration"]["reused"] is True


def test_pool_replay_calibrates_routed_by_the_pools_active_policy(
    open_embedded: TestClient,
) -> None:
    client = open_embedded
    runtime = runtime_of(client)
    post(client, epp_samples(seconds=70.0))
    set_slo(client, 2000, 100)
    sticky = {"chain": "llm-d-default", "sticky_affinity_threshold": 0.5}
    assert client.put("/v1/policies/1", json=sticky).status_code == 200
    r = client.post("/v1/pools/default/advice", json={"workload": "pool-replay"})
    assert r.status_code == 202, r.text
    done = _wait(client, f"/v1/pools/default/advice/{r.json()['id']}", {})
    assert done["status"] == "done", done["message"]
    workload = done["result"]["workload"]
    calibration = workload["replay"]["calibration"]
    active = "llm-d-default(affinity_threshold=0.5)"
    assert calibration["router"] == active and calibration["router_is_active_policy"] is True
    assert calibration["router_fallback"] is None and calibration["reused"] is False
    assert f"routed by the pool's active policy ({active})" in workload["label"]

    # Desired replicas keeps its own router: a calibration of its own, kept beside the advice's.
    with runtime.sessions() as session:
        pool_id = runtime.pools.resolve(session, "default")
    assert refresh_all(runtime.sessions, runtime.settings.capacity) == 1
    # Keyed by the profiles the calibration may pick too: every shipped one (None) here.
    kept = {(pool_id, active, None), (pool_id, "llm-d-322", None)}
    assert kept <= set(desired_module._calibrations)
    again = client.post("/v1/pools/default/advice", json={"workload": "pool-replay"})
    second = _wait(client, f"/v1/pools/default/advice/{again.json()['id']}", {})
    assert second["status"] == "done", second["message"]
    reused = second["result"]["workload"]["replay"]["calibration"]
    assert reused["router"] == active and reused["reused"] is True
    assert reused["profile"] == calibration["profile"]
    assert reused["prefill_scale"] == calibration["prefill_scale"]


def test_pool_replay_with_too_little_traffic_is_a_422_naming_why(
    open_embedded: TestClient,
) -> None:
    client = open_embedded
    set_slo(client, 2000, 100)
    post(client, epp_samples(seconds=3.0))  # a handful of requests
    r = client.post("/v1/pools/default/advice", json={"workload": "pool-replay"})
    assert r.status_code == 422, r.text
    body = r.json()
    assert "too little traffic" in body["detail"]
    assert f"needs {(TINY.seeds + 1) * 20}" in body["detail"]
    # Not the default either: the advice still starts, on a shipped trace.
    fallback = client.post("/v1/pools/default/advice")
    assert fallback.status_code == 202 and fallback.json()["workload"] == "mooncake"
