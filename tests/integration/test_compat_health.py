"""Upstream's health, readiness, root document and metrics text, at the root and per pool.

Written from upstream's documented behaviour: both EPP URLs may be a pool's base URL, so every
route the EPP or upstream's tooling calls must exist under `/pools/{pool}` too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.settings import ServingSettings, Settings
from tests.integration.test_prediction import ingest, rows, train_and_load

BASES = ("", "/pools/default")


@pytest.mark.parametrize("base", BASES)
def test_health_routes_answer_at_both_base_urls(client: TestClient, base: str) -> None:
    assert client.get(f"{base}/healthz").json() == {"status": "ok"}
    ready = client.get(f"{base}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"
    assert ready.json()["model_type"] == "xgboost"
    status = client.get(f"{base}/status").json()
    assert status["is_ready"] is False and "models_exist" in status
    root = client.get(f"{base}/")
    assert root.status_code == 200
    doc = root.json()
    assert doc["model_type"] == "xgboost" and doc["is_ready"] is False
    assert {"message", "objective_type", "quantile", "sync_interval", "training_server"} <= set(doc)


def test_an_unknown_pool_has_no_health(client: TestClient) -> None:
    for path in ("healthz", "readyz", ""):
        assert client.get(f"/pools/nowhere/{path}").status_code == 404


def test_a_browser_at_the_root_gets_the_console(client: TestClient) -> None:
    r = client.get("/", headers={"accept": "text/html,*/*"}, follow_redirects=False)
    assert r.status_code == 307 and r.headers["location"] == "/ui/"


@pytest.fixture
def strict_readiness(settings: Settings) -> Iterator[TestClient]:
    strict = settings.model_copy(update={"serving": ServingSettings(ready_without_model=False)})
    with TestClient(create_app(strict)) as c:
        yield c


def test_without_the_fallback_a_pool_is_ready_once_it_has_a_model(
    strict_readiness: TestClient,
) -> None:
    client = strict_readiness
    for base in BASES:
        r = client.get(f"{base}/readyz")
        assert r.status_code == 503
        assert r.json() == {"detail": "Models are not ready"}
        assert client.get(f"{base}/healthz").status_code == 200
    ingest(client, rows(300))
    train_and_load(client)
    for base in BASES:
        r = client.get(f"{base}/readyz")
        assert r.status_code == 200 and r.json()["model_loaded"] is True


@pytest.mark.parametrize("base", BASES)
def test_metrics_read_like_upstreams_text(client: TestClient, base: str) -> None:
    ingest(client, rows(300))
    train_and_load(client)
    text = client.get(f"{base}/metrics").text
    # Upstream prints the braces of unlabelled series and whole numbers without ".0".
    for line in (
        'model_type{type="xgboost"} 1',
        'objective_type{type="mean"} 1',
        "model_quantile{} 0.9",
        "ensemble_active{} 0",
        "ensemble_mode{} 0",
    ):
        assert line in text.splitlines()
    assert re.search(r'^ttft_importance\{feature="prefix_cache_score"\} [0-9.e-]+$', text, re.M)
    assert re.search(r'^training_samples_count\{model="ttft",.*\} \d+$', text, re.M)


def test_the_api_docs_carry_a_content_security_policy(client: TestClient) -> None:
    for path in ("/docs", "/redoc"):
        r = client.get(path)
        assert r.status_code == 200
        policy = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy
        assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]
        assert r.headers["x-frame-options"] == "DENY"
    # Swagger UI's one inline script is allowed by its hash, so the page still works.
    assert "'sha256-" in client.get("/docs").headers["content-security-policy"]
