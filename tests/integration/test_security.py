"""Tokens, scopes and roles on every write route; artifacts never go near pickle."""

from __future__ import annotations

import ast
import pickle
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from backend.app import create_app
from backend.auth.service import create_token, create_user
from backend.db import unit_of_work
from backend.predictor.artifacts import ArtifactError
from backend.predictor.models import load_model
from backend.settings import AuthSettings, Settings

WRITE = {"POST", "PUT", "PATCH", "DELETE"}
OPEN = {"/healthz", "/readyz", "/metrics"}


@pytest.fixture
def locked(settings: Settings) -> Iterator[TestClient]:
    strict = settings.model_copy(
        update={"auth": AuthSettings(required=True, trust_upstream_routes=False)}
    )
    with TestClient(create_app(strict)) as c:
        yield c


def token(sessions: sessionmaker[Session], user: str, role: str, scopes: list[str]) -> str:
    with unit_of_work(sessions) as session:
        u = create_user(session, user, "a long enough password", role)  # type: ignore[arg-type]
        _, clear = create_token(session, u, "t", scopes)
    return clear


def api_write_routes() -> list[tuple[str, str]]:
    """Every documented write route (the OpenAPI schema lists them all)."""
    routes = []
    for path, operations in create_app(Settings()).openapi()["paths"].items():
        if path in OPEN or path.startswith("/ui"):
            continue
        for method in {m.upper() for m in operations} & WRITE:
            for name, value in (
                ("pool", "default"),
                ("policy_id", "1"),
                ("version_id", "1"),
                ("objective_id", "1"),
                ("target", "ttft"),
            ):
                path = path.replace("{" + name + "}", value)
            routes.append((method, path))
    return sorted(routes)


def test_every_api_write_route_refuses_a_missing_or_bad_token(locked: TestClient) -> None:
    routes = api_write_routes()
    assert len(routes) >= 15  # ingestion, prediction, schedule, policies, objectives, models...
    for method, path in routes:
        r = locked.request(method, path, json={})
        assert r.status_code == 401, (method, path, r.status_code)
        r = locked.request(method, path, json={}, headers={"Authorization": "Bearer hr_forged"})
        assert r.status_code == 401, (method, path, r.status_code)


def test_scopes_and_roles_decide(locked: TestClient, sessions: sessionmaker[Session]) -> None:
    predict_only = {"Authorization": f"Bearer {token(sessions, 'epp', 'viewer', ['predict'])}"}
    ingest_only = {"Authorization": f"Bearer {token(sessions, 'feed', 'viewer', ['ingest'])}"}
    admin_ingest = {"Authorization": f"Bearer {token(sessions, 'ops', 'admin', ['ingest'])}"}
    entry = {
        "kv_cache_percentage": 0.1,
        "input_token_length": 10,
        "num_request_waiting": 0,
        "num_request_running": 0,
        "num_tokens_generated": 0,
        "prefix_cache_score": 0,
        "actual_ttft_ms": 5,
        "actual_tpot_ms": 0,
    }
    body = {"entries": [entry]}
    assert (
        locked.post("/add_training_data_bulk", json=body, headers=predict_only).status_code == 403
    )
    assert locked.post("/add_training_data_bulk", json=body, headers=ingest_only).status_code == 202
    assert locked.post("/v1/samples", json=body, headers=ingest_only).status_code == 200
    one = {"requests": [{k: v for k, v in entry.items() if not k.startswith("actual")}]}
    assert locked.post("/predict/bulk/strict", json=one, headers=ingest_only).status_code == 403
    assert locked.post("/predict/bulk/strict", json=one, headers=predict_only).status_code == 503
    # An admin's token without the admin scope cannot change policies.
    put = locked.put("/v1/policies/1", json={"strategy": "most"}, headers=admin_ingest)
    assert put.status_code == 403 and "admin scope" in put.json()["detail"]


def test_trusted_upstream_routes_stay_open_for_the_epp(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    trusting = settings.model_copy(update={"auth": AuthSettings(required=True)})
    with TestClient(create_app(trusting)) as c:
        r = c.post("/add_training_data_bulk", json={"entries": []})
        assert r.status_code == 202
        assert c.post("/v1/samples", json={"entries": []}).status_code == 401
        assert c.get("/v1/policies").status_code == 401


def test_artifacts_are_never_unpickled() -> None:
    with pytest.raises(ArtifactError):
        load_model(pickle.dumps({"kind": "hybrid"}))
    backend = Path(__file__).resolve().parents[2] / "backend"
    for path in backend.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not {"pickle", "joblib", "cloudpickle", "dill"} & {
                n.split(".")[0] for n in names
            }, path
