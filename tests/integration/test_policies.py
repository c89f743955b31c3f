"""Policies and objectives over REST: validation, audit history with identity, restore."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.auth.service import create_token, create_user
from backend.db import unit_of_work
from backend.policies.schemas import UPSTREAM_SPEC, PolicySpec
from backend.pools.schemas import PoolCreate
from backend.pools.service import create_pool
from backend.settings import AuthSettings, Settings


def token_for(sessions: sessionmaker[Session], username: str, role: str) -> dict[str, str]:
    with unit_of_work(sessions) as session:
        user = create_user(session, username, "correct horse battery", role)  # type: ignore[arg-type]
        _, clear = create_token(session, user, "test", ["admin"])
    return {"Authorization": f"Bearer {clear}"}


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    strict = settings.model_copy(update={"auth": AuthSettings(required=True)})
    with TestClient(create_app(strict)) as c:
        yield c


def test_default_pool_has_the_new_pool_default(client: TestClient) -> None:
    [policy] = client.get("/v1/policies").json()
    assert policy["pool"] == "default" and policy["version"] == 1
    spec = policy["spec"]
    # Upstream's values but the strategy: docs/benchmarks.md, "New pools' default policy".
    assert spec["chain"] == "predicted-latency"
    assert spec["strategy"] == "most"
    assert spec["ttft_weight"] == 0.8
    assert spec["epsilon_explore_neg"] == 0.01
    assert spec["strict_affinity_threshold"] == 0.99
    assert spec["loose_affinity_threshold"] == 0.8
    assert spec["max_ttft_penalty_ms"] == 5000.0
    assert spec["picker"] == "weighted_random"


def test_edit_is_versioned_with_the_editors_identity(
    secured: TestClient, sessions: sessionmaker[Session]
) -> None:
    alice = token_for(sessions, "alice", "editor")
    policy_id = secured.get("/v1/policies", headers=alice).json()[0]["id"]
    r = secured.put(
        f"/v1/policies/{policy_id}",
        json={"strategy": "least", "ttft_weight": 0.6, "default_ttft_slo_ms": 800},
        headers=alice,
    )
    assert r.status_code == 200
    assert r.json()["version"] == 2 and r.json()["updated_by"] == "alice"
    history = secured.get(f"/v1/policies/{policy_id}/history", headers=alice).json()
    assert [h["version"] for h in history] == [2, 1]
    latest = history[0]
    assert latest["changed_by"] == "alice" and latest["action"] == "update"
    assert latest["changes"] == {
        "strategy": ["most", "least"],
        "ttft_weight": [0.8, 0.6],
        "default_ttft_slo_ms": [None, 800.0],
    }
    # Sending the same values again changes nothing and makes no version.
    secured.put(f"/v1/policies/{policy_id}", json={"strategy": "least"}, headers=alice)
    assert len(secured.get(f"/v1/policies/{policy_id}/history", headers=alice).json()) == 2


def test_restore_makes_an_old_version_current_as_a_new_version(
    client: TestClient,
) -> None:
    policy_id = client.get("/v1/policies").json()[0]["id"]
    client.put(f"/v1/policies/{policy_id}", json={"picker": "best_fit", "ttft_weight": 0.5})
    r = client.post(f"/v1/policies/{policy_id}/restore", json={"version": 1})
    assert r.status_code == 200
    assert r.json()["version"] == 3
    assert r.json()["spec"]["picker"] == "weighted_random"
    assert r.json()["spec"]["ttft_weight"] == 0.8
    history = client.get(f"/v1/policies/{policy_id}/history").json()
    assert history[0]["action"] == "restore" and history[0]["changed_by"] == "local"
    assert client.post(f"/v1/policies/{policy_id}/restore", json={"version": 9}).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"ttft_weight": 1.5}, "ttft_weight"),
        ({"ttft_weight": -0.1}, "ttft_weight"),
        ({"strategy": "fastest"}, "strategy"),
        ({"default_ttft_slo_ms": 0}, "default_ttft_slo_ms"),
        ({"epsilon_explore_neg": 2}, "epsilon_explore_neg"),
        ({"picker": "lottery"}, "picker"),
        ({"gpu_profile": "b200-llama3-70b"}, "gpu_profile"),
        ({"no_such_option": 1}, "no_such_option"),
    ],
)
def test_bad_policy_values_are_422_naming_the_field(
    client: TestClient, body: dict[str, object], field: str
) -> None:
    policy_id = client.get("/v1/policies").json()[0]["id"]
    r = client.put(f"/v1/policies/{policy_id}", json=body)
    assert r.status_code == 422
    assert r.json()["errors"][0]["field"] == field
    assert client.get(f"/v1/policies/{policy_id}").json()["version"] == 1


def test_roles_and_tokens_are_enforced(
    secured: TestClient, sessions: sessionmaker[Session]
) -> None:
    viewer = token_for(sessions, "victor", "viewer")
    policy_id = secured.get("/v1/policies", headers=viewer).json()[0]["id"]
    r = secured.put(f"/v1/policies/{policy_id}", json={"strategy": "most"}, headers=viewer)
    assert r.status_code == 403
    assert secured.put(f"/v1/policies/{policy_id}", json={"strategy": "most"}).status_code == 401
    forged = {"Authorization": "Bearer hr_not-a-real-token"}
    assert secured.get("/v1/policies", headers=forged).status_code == 401
    assert secured.get(f"/v1/policies/{policy_id}", headers=viewer).json()["version"] == 1


def test_a_new_pool_gets_the_default_policy_and_upstream_is_a_preset_away(
    client: TestClient,
) -> None:
    client.post("/v1/pools", json={"name": "b200"})
    pools = {p["pool"]: p for p in client.get("/v1/policies").json()}
    assert set(pools) == {"default", "b200"}
    new = pools["b200"]
    assert new["spec"] == PolicySpec().model_dump(mode="json")
    # The chosen default: upstream's predicted-latency chain, every value upstream's but the
    # strategy (most: spread), so an unchanged EPP can run it and keeps asking for predictions.
    upstream = UPSTREAM_SPEC.model_dump(mode="json")
    assert {k: v for k, v in new["spec"].items() if upstream[k] != v} == {"strategy": "most"}
    assert upstream["strategy"] == "least" and upstream["chain"] == "predicted-latency"
    dup = client.post("/v1/policies", json={"pool": "b200"})
    assert dup.status_code == 409

    # What the platform team exports for it: the predicted-latency chain spreading by headroom.
    exported = client.get(f"/v1/policies/{new['id']}/epp-config")
    assert exported.status_code == 200
    config = yaml.safe_load(exported.text)
    assert config["kind"] == "EndpointPickerConfig"
    plugins = {p.get("name", p["type"]): p for p in config["plugins"]}
    assert plugins["latency-scorer"]["parameters"]["headroomSelectionStrategy"] == "most"
    assert plugins["weighted-random-picker"]["type"] == "weighted-random-picker"

    preset = client.post(f"/v1/policies/{new['id']}/preset/upstream")
    assert preset.status_code == 200, preset.text
    assert preset.json()["version"] == 2
    assert preset.json()["spec"] == upstream
    exported = yaml.safe_load(client.get(f"/v1/policies/{new['id']}/epp-config").text)
    plugins = {p.get("name", p["type"]): p for p in exported["plugins"]}
    assert plugins["latency-scorer"]["parameters"]["headroomSelectionStrategy"] == "least"


def test_a_policy_created_over_rest_defaults_to_the_new_pool_policy(
    client: TestClient, sessions: sessionmaker[Session]
) -> None:
    with unit_of_work(sessions) as session:
        create_pool(session, PoolCreate(name="bare"))
    r = client.post("/v1/policies", json={"pool": "bare", "default_ttft_slo_ms": 900})
    assert r.status_code == 201, r.text
    assert r.json()["spec"] == PolicySpec(default_ttft_slo_ms=900).model_dump(mode="json")
    assert r.json()["spec"]["strategy"] == "most"


def test_objectives_crud(client: TestClient) -> None:
    r = client.post("/v1/objectives", json={"pool": "default", "name": "batch", "priority": -1})
    assert r.status_code == 201 and r.json()["sheddable"] is True
    client.post("/v1/objectives", json={"pool": "default", "name": "chat", "priority": 10})
    names = [o["name"] for o in client.get("/v1/objectives", params={"pool": "default"}).json()]
    assert names == ["chat", "batch"]  # most critical first
    dup = client.post("/v1/objectives", json={"pool": "default", "name": "chat"})
    assert dup.status_code == 409
    bad = client.post("/v1/objectives", json={"pool": "default", "name": "Bad Name"})
    assert bad.status_code == 422
    oid = r.json()["id"]
    updated = client.put(f"/v1/objectives/{oid}", json={"priority": 3}).json()
    assert updated["priority"] == 3 and updated["sheddable"] is False
    assert client.delete(f"/v1/objectives/{oid}").status_code == 204
    assert client.get(f"/v1/objectives/{oid}").status_code == 404
