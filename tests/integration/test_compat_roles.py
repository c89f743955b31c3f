"""llm-d's pod roles (`llm-d.ai/role`, sent raw as `pod_type`): no batch is lost over one.

From llm-d's documented role values: "" (none), prefill, decode, prefill-decode and both (one
pod serving both phases), encode, encode-prefill and encode-prefill-decode (multimodal).
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session, sessionmaker

from backend.samples.models import Sample
from tests.factories import entry
from tests.integration.test_prediction import ingest, rows, train_and_load
from tests.integration.test_schedule import pod
from tests.integration.test_security import make_user, signed_in

LLM_D_ROLES = (
    "",
    "prefill",
    "decode",
    "prefill-decode",
    "both",
    "encode",
    "encode-prefill",
    "encode-prefill-decode",
)
# Plausible values no release of llm-d defines (yet): kept and reported, never refused.
OTHER_ROLES = ("Prefill_Decode", "mixed", "gpu-pool-b")


def _features(role: str) -> dict[str, Any]:
    return {
        "kv_cache_percentage": 0.3,
        "input_token_length": 400,
        "num_request_waiting": 1,
        "num_request_running": 4,
        "num_tokens_generated": 8,
        "prefix_cache_score": 0.5,
        "pod_type": role,
    }


def test_a_batch_with_every_role_is_stored_whole(
    client: TestClient, engine: Engine, sessions: sessionmaker[Session]
) -> None:
    roles = (*LLM_D_ROLES, *OTHER_ROLES)
    entries = [entry(pod_type=role, pod=f"pod-{i}") for i, role in enumerate(roles)]
    for path in ("/add_training_data_bulk", "/v1/samples"):
        r = client.post(path, json={"entries": entries})
        assert r.status_code in (200, 202), r.text
    with engine.connect() as conn:
        stored = dict(
            conn.execute(
                select(func.coalesce(Sample.pod_role, ""), func.count()).group_by(Sample.pod_role)
            ).all()
        )
    # Every row of both batches, each with the value exactly as sent.
    assert stored == {role: 2 for role in roles}
    stats = client.get("/v1/samples/stats").json()
    assert sorted(stats["unknown_pod_types"]) == sorted(["mixed", "gpu-pool-b"])
    known = {r["pod_type"]: r["known"] for r in stats["pod_types"]}
    assert known["Prefill_Decode"] and known["encode-prefill-decode"] and not known["mixed"]
    make_user(sessions, "ops", "viewer")
    signed_in(client, "ops")
    page = client.get("/ui/samples")
    assert page.status_code == 200
    assert "gpu-pool-b" in page.text and "unknown role" in page.text


def test_the_model_reads_both_phase_roles_as_monolithic(client: TestClient, engine: Engine) -> None:
    ingest(client, rows(400))
    train_and_load(client)
    body = {"requests": [_features(role) for role in (*LLM_D_ROLES, *OTHER_ROLES)]}
    strict = client.post("/predict/bulk/strict", json=body)
    assert strict.status_code == 200, strict.text
    predictions = strict.json()["predictions"]
    assert len(predictions) == len(body["requests"])
    ttft = dict(zip((*LLM_D_ROLES, *OTHER_ROLES), (p["ttft_ms"] for p in predictions), strict=True))
    assert all(v > 0 for v in ttft.values())
    # Serving both phases is what a pod without a role does; so is a role nobody knows.
    for same in ("prefill-decode", "both", "Prefill_Decode", "mixed"):
        assert ttft[same] == ttft[""]
    lenient = client.post("/predict/bulk", json=body).json()
    assert lenient["errors"] == [] and lenient["successful_predictions"] == len(ttft)
    for role in LLM_D_ROLES:
        assert client.post("/predict", json=_features(role)).status_code == 200
        assert client.post("/v1/predict", json=_features(role)).status_code == 200


def test_absurd_roles_are_refused_by_name(client: TestClient, engine: Engine) -> None:
    for bad in (7, "x" * 64, "decode\x00", "pre\nfill"):
        r = client.post("/predict", json=_features(bad))  # type: ignore[arg-type]
        assert r.status_code == 422, bad
        assert r.json()["detail"].startswith("pod_type")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM samples")).scalar_one() == 0


def test_schedule_takes_llm_d_roles(client: TestClient) -> None:
    pods = [
        pod("p", role="encode-prefill"),
        pod("d", role="decode"),
        pod("m", role="both"),
        pod("x", role="Prefill_Decode"),
    ]
    r = client.post("/v1/schedule", json={"request": {"prompt_tokens": 100}, "candidates": pods})
    assert r.status_code == 200, r.text
    for bad in ("encode", 3, "gpu"):
        body = {"request": {"prompt_tokens": 100}, "candidates": [pod("e", role=bad)]}
        r = client.post("/v1/schedule", json=body)
        assert r.status_code == 422, bad
        assert r.json()["detail"].startswith("candidates[0].role")
