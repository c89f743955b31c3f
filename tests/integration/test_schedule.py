"""`POST /v1/schedule` and the EPP config export, against the real database and models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.routing import service as routing_service
from backend.settings import ServingSettings, Settings
from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.integration.test_prediction import make_trainer

PROFILE = load_profile("a100-llama3-8b")


def pod(name: str, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": name,
        "kv_cache_percentage": 0.3,
        "input_token_length": 2000,
        "num_request_waiting": 0,
        "num_request_running": 8,
        "prefix_cache_score": 0.0,
        "prefill_tokens_in_flight": 0,
    }
    base.update(overrides)
    return base


@pytest.fixture
def trained(client: TestClient) -> TestClient:
    rows = sample_rows(3000, np.random.default_rng(0), PROFILE)
    entries = training_entries(rows)
    for i in range(0, len(entries), 5000):
        client.post("/add_training_data_bulk", json={"entries": entries[i : i + 5000]})
    make_trainer(client).run_once()
    client.post("/reload")
    return client


def schedule(client: TestClient, candidates: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    headers = kw.pop("headers", {})
    request = {"prompt_tokens": 2000, "seed": 7, **kw}
    r = client.post(
        "/v1/schedule", json={"request": request, "candidates": candidates}, headers=headers
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def policy_id(client: TestClient) -> int:
    return int(client.get("/v1/policies").json()[0]["id"])


def test_without_a_model_the_heuristic_decides_and_nothing_is_dropped(client: TestClient) -> None:
    out = schedule(client, [pod("a", num_request_waiting=9), pod("b")], ttft_slo_ms=500)
    decision = out["decision"]
    assert decision["admitted"] is True
    assert decision["fallback"] is True
    assert decision["chosen"] in {"a", "b"}


def test_slos_come_from_body_then_headers_then_policy(trained: TestClient) -> None:
    pods = [pod("a"), pod("b", num_request_running=30, kv_cache_percentage=0.8)]
    out = schedule(trained, pods, headers={"x-llm-d-slo-ttft-ms": "900", "x-slo-tpot-ms": "40"})
    assert (out["ttft_slo_ms"], out["tpot_slo_ms"]) == (900.0, 40.0)
    assert out["slo_source"] == {"ttft": "header", "tpot": "header"}
    assert out["decision"]["fallback"] is False
    traces = {c["name"]: c for c in out["decision"]["candidates"]}
    assert traces["a"]["ttft_ms"] > 0 and traces["a"]["ttft_headroom_ms"] == pytest.approx(
        900.0 - traces["a"]["ttft_ms"], rel=1e-6
    )
    trained.put(f"/v1/policies/{policy_id(trained)}", json={"default_ttft_slo_ms": 750})
    out = schedule(trained, pods, tpot_slo_ms=30)
    assert (out["ttft_slo_ms"], out["slo_source"]["ttft"]) == (750.0, "policy")
    assert (out["tpot_slo_ms"], out["slo_source"]["tpot"]) == (30.0, "request")
    bad = trained.post(
        "/v1/schedule",
        json={"request": {"prompt_tokens": 10}, "candidates": pods},
        headers={"x-llm-d-slo-ttft-ms": "soon"},
    )
    assert bad.status_code == 422 and "x-llm-d-slo-ttft-ms" in bad.json()["detail"]


def test_sheddable_objective_is_rejected_only_when_no_pod_can_meet_the_slo(
    trained: TestClient,
) -> None:
    trained.post("/v1/objectives", json={"pool": "default", "name": "batch", "priority": -1})
    busy = [
        pod(
            n,
            num_request_running=40,
            num_request_waiting=20,
            kv_cache_percentage=0.9,
            prefill_tokens_in_flight=60000,
        )
        for n in ("a", "b")
    ]
    impossible = {"ttft_slo_ms": 1.0, "tpot_slo_ms": 1.0}
    shed = schedule(trained, busy, objective="batch", **impossible)
    assert shed["priority"] == -1
    assert shed["decision"]["admitted"] is False
    assert "cannot be admitted" in shed["decision"]["reason"]
    # Same request, critical objective: admitted and sent to the pod that misses by least.
    critical = schedule(
        trained, busy, headers={"x-llm-d-inference-objective": "chat"}, **impossible
    )
    assert critical["decision"]["admitted"] is True
    # An idle pod admits even the sheddable request (it fails open).
    idle = schedule(
        trained, [*busy, pod("idle", num_request_running=0)], objective="batch", **impossible
    )
    assert idle["decision"]["admitted"] is True


def test_best_fit_picker_takes_the_smallest_positive_headroom(trained: TestClient) -> None:
    # Best fit at upstream's strategy, `least` (a new pool's is `most`: the largest).
    trained.put(
        f"/v1/policies/{policy_id(trained)}", json={"picker": "best_fit", "strategy": "least"}
    )
    pods = [pod(f"p{i}", num_request_running=4 * i, kv_cache_percentage=0.05 * i) for i in range(8)]
    out = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60)
    traces = out["decision"]["candidates"]
    positive = [c for c in traces if c["ttft_headroom_ms"] >= 0 and c["tpot_headroom_ms"] >= 0]
    assert positive, "the scenario needs pods that meet the SLO"
    combined = {
        c["name"]: 0.8 * c["ttft_headroom_ms"] + 0.2 * c["tpot_headroom_ms"] for c in positive
    }
    assert out["decision"]["chosen"] == min(combined, key=combined.__getitem__)
    again = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60, seed=99)
    assert again["decision"]["chosen"] == out["decision"]["chosen"]  # deterministic


def test_joint_pd_avoids_the_cross_region_pair_greedy_picks(trained: TestClient) -> None:
    east = {"host": "e1", "rack": "er1", "zone": "ez", "region": "east"}
    west = {"host": "w1", "rack": "wr1", "zone": "wz", "region": "west"}
    west2 = {**west, "host": "w2"}
    pods = [
        pod(
            "p-east", role="prefill", num_request_running=0, kv_cache_percentage=0.01, topology=east
        ),
        pod(
            "p-west",
            role="prefill",
            num_request_running=6,
            prefill_tokens_in_flight=2000,
            topology=west,
        ),
        pod("d-west", role="decode", num_request_running=2, topology=west2),
        pod(
            "d-east", role="decode", num_request_running=60, kv_cache_percentage=0.9, topology=east
        ),
    ]
    request = {"prompt_tokens": 8000, "stream": True}
    greedy = schedule(trained, [{**p, "input_token_length": 8000} for p in pods], **request)
    pd = greedy["decision"]["pd"]
    assert (pd["greedy_prefill"], pd["greedy_decode"]) == ("p-east", "d-west")
    trained.put(f"/v1/policies/{policy_id(trained)}", json={"pd_selection": "joint"})
    joint = schedule(trained, [{**p, "input_token_length": 8000} for p in pods], **request)
    pd = joint["decision"]["pd"]
    assert pd["selection"] == "joint"
    assert (joint["decision"]["prefill"], joint["decision"]["decode"]) == ("p-west", "d-west")
    assert pd["saved_ms"] > 0
    assert pd["e2e_ms"] + pd["saved_ms"] == pytest.approx(pd["greedy_e2e_ms"], rel=1e-6)


def test_epp_config_reflects_policy_edits(client: TestClient) -> None:
    import yaml

    pid = policy_id(client)
    client.put(
        f"/v1/policies/{pid}",
        # A new pool's strategy is `most`: upstream's `least` is the edit.
        json={"strategy": "least", "ttft_weight": 0.6, "epsilon_explore_neg": 0.05},
    )
    r = client.get(f"/v1/policies/{pid}/epp-config")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/yaml")
    assert "policy version 2" in r.text
    config = yaml.safe_load(r.text)
    assert config["kind"] == "EndpointPickerConfig"
    plugins = {p.get("name", p["type"]): p for p in config["plugins"]}
    scorer = plugins["latency-scorer"]["parameters"]
    assert scorer["headroomSelectionStrategy"] == "least"
    assert scorer["ttftWeight"] == 0.6
    assert plugins["slo-headroom-tier-filter"]["parameters"]["epsilonExploreNeg"] == 0.05
    assert plugins["strict-affinity-filter"]["parameters"]["affinityThreshold"] == 0.99


def test_interference_scorer_is_a_policy_option_and_headroom_only(trained: TestClient) -> None:
    pid = policy_id(trained)
    bad = trained.put(f"/v1/policies/{pid}", json={"scorer": "magic"})
    assert bad.status_code == 422
    assert trained.put(f"/v1/policies/{pid}", json={"scorer": "interference"}).status_code == 200
    pods = [
        pod(f"p{i}", num_request_running=3 * i, prefill_tokens_in_flight=1000 * i) for i in range(4)
    ]
    out = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60)
    decision = out["decision"]
    assert not decision["fallback"]
    assert any(s["plugin"] == "interference-scorer" for s in decision["steps"])
    chosen = next(c for c in decision["candidates"] if c["name"] == decision["chosen"])
    assert chosen["removed_by"] is None
    export = trained.get(f"/v1/policies/{pid}/epp-config").text
    assert "#   scorer: interference" in export
    assert "#   scorer_upstream_equivalent: False" in export


def test_the_tier_can_compare_the_served_tpot_p90_with_the_slo(trained: TestClient) -> None:
    pods = [pod(f"p{i}", num_request_running=4 * i, kv_cache_percentage=0.05 * i) for i in range(8)]
    rows = [
        {**{k: v for k, v in p.items() if k != "name"}, "num_tokens_generated": 1} for p in pods
    ]
    answer = trained.post("/v1/predict/bulk", json={"requests": rows})
    assert answer.status_code == 200, answer.text
    served = answer.json()["predictions"]
    mean = np.array([p["tpot_ms"] for p in served])
    p90 = np.array([p["tpot_p90_ms"] for p in served])
    # An SLO every pod's mean meets but the busiest pod's p90 does not.
    slo = float((mean.max() + p90[int(mean.argmax())]) / 2)
    assert mean.max() < slo < p90.max()

    def tiers() -> dict[str, str]:
        out = schedule(trained, pods, ttft_slo_ms=1e6, tpot_slo_ms=slo)
        return {c["name"]: c["tier"] for c in out["decision"]["candidates"]}

    assert set(tiers().values()) == {"positive"}  # default: upstream's mean
    r = trained.put(f"/v1/policies/{policy_id(trained)}", json={"tpot_tier_quantile": "p90"})
    assert r.status_code == 200, r.text
    by_p90 = tiers()
    assert by_p90[f"p{int(mean.argmax())}"] == "negative"
    assert {by_p90[f"p{i}"] for i in range(8) if p90[i] < slo} == {"positive"}
    bad = trained.put(f"/v1/policies/{policy_id(trained)}", json={"tpot_tier_quantile": "p99"})
    assert bad.status_code == 422


def test_each_chain_a_policy_names_is_what_schedule_runs(trained: TestClient) -> None:
    """The same candidates under each chain: the predicted one uses the served models, the
    load chains decide on the wire fields alone (no prediction in their traces)."""
    pid = policy_id(trained)
    pods = [
        pod("warm", prefix_cache_score=0.9, prefill_tokens_in_flight=6000, num_request_waiting=3),
        pod("cold", prefix_cache_score=0.0, prefill_tokens_in_flight=0, num_request_waiting=0),
        pod("busy", prefix_cache_score=0.0, prefill_tokens_in_flight=9000, num_request_waiting=6),
    ]
    predicted = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60)["decision"]
    assert predicted["mode"] == "slo" and not predicted["fallback"]
    assert all(c["ttft_ms"] is not None for c in predicted["candidates"])

    version = 1
    expected = {
        # Sticky: warm holds 90 % of the prompt, 6,000 tokens ahead is within the penalty.
        "llm-d-default": ({}, "warm"),
        # Gate at 4,000 tokens: broken, then the fewest tokens (cold: 2,000).
        "llm-d-default ": ({"max_tokens_in_flight_penalty": 4000}, "cold"),
        # Prefix only: the warm pod.
        "load-prefix": (
            {"load_prefix_queue_weight": 0, "load_prefix_kv_weight": 0},
            "warm",
        ),
        # Queue only: the empty queue.
        "load-prefix ": (
            {"load_prefix_queue_weight": 1, "load_prefix_prefix_weight": 0},
            "cold",
        ),
        # LMetric with the router's in-flight count: cold's 2,000 new tokens x 8 beat warm's
        # 200 + 6,000 pending x 8.
        "lmetric": ({}, "cold"),
        # Only this request's tokens: warm's 200 x 8 wins.
        "lmetric ": ({"lmetric_pending": False}, "warm"),
    }
    for key, (fields, chosen) in expected.items():
        chain = key.strip()
        r = trained.put(f"/v1/policies/{pid}", json={"chain": chain, **fields})
        assert r.status_code == 200, r.text
        version = r.json()["version"]
        out = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60)
        decision = out["decision"]
        assert out["policy_version"] == version
        assert decision["mode"] == chain and decision["admitted"], key
        assert decision["chosen"] == chosen, (key, decision["candidates"])
        # No predictor: the decision carries no predictions, and it is not a fallback.
        assert all(c["ttft_ms"] is None for c in decision["candidates"])
        assert not decision["fallback"] and decision["picker"] == "max-score-picker"
        # The upstream preset puts the predicted-latency chain back, with every chain's defaults.
        reset = trained.post(f"/v1/policies/{pid}/preset/upstream").json()["spec"]
        assert reset["chain"] == "predicted-latency" and reset["load_prefix_queue_weight"] == 2


def test_bad_chain_parameters_are_a_422_naming_the_field(client: TestClient) -> None:
    pid = policy_id(client)
    cases = {
        "chain": {"chain": "round-robin"},
        "sticky_affinity_threshold": {"sticky_affinity_threshold": 1.5},
        "max_tokens_in_flight_penalty": {"max_tokens_in_flight_penalty": -1},
        "queue_threshold_tokens": {"queue_threshold_tokens": 0},
        "load_prefix_kv_weight": {"load_prefix_kv_weight": -0.5},
        "lmetric_batch": {"lmetric_batch": "gauge"},
        # Valid one by one, refused together: the chain needs a weight above 0.
        "load_prefix_prefix_weight": {
            "chain": "load-prefix",
            "load_prefix_queue_weight": 0,
            "load_prefix_kv_weight": 0,
            "load_prefix_prefix_weight": 0,
        },
    }
    for field, body in cases.items():
        r = client.put(f"/v1/policies/{pid}", json=body)
        assert r.status_code == 422, (field, r.text)
        assert r.json()["detail"].startswith(field), (field, r.json())
    # A partial update that makes a stored load-prefix policy weightless is refused too.
    ok = client.put(
        f"/v1/policies/{pid}",
        json={"chain": "load-prefix", "load_prefix_queue_weight": 0, "load_prefix_kv_weight": 0},
    )
    assert ok.status_code == 200, ok.text
    r = client.put(f"/v1/policies/{pid}", json={"load_prefix_prefix_weight": 0})
    assert r.status_code == 422 and "load-prefix chain needs" in r.json()["detail"]
    assert client.get("/v1/policies").json()[0]["version"] == ok.json()["version"]


def test_lmetric_policy_has_no_epp_config_and_says_why(client: TestClient) -> None:
    pid = policy_id(client)
    assert client.put(f"/v1/policies/{pid}", json={"chain": "lmetric"}).status_code == 200
    r = client.get(f"/v1/policies/{pid}/epp-config")
    assert r.status_code == 409
    assert "Headroom-only" in r.json()["detail"] and "/v1/schedule" in r.json()["detail"]


@pytest.fixture
def holding(settings: Settings, trained: TestClient) -> Iterator[TestClient]:
    """The trained pool served by an app that holds each decision for a minute: long enough
    that no test's pace lets one expire (the default is about a router's dispatch time)."""
    held = settings.model_copy(update={"serving": ServingSettings(decided_hold_ms=60_000.0)})
    with TestClient(create_app(held)) as c:
        yield c


def test_decisions_are_held_so_a_burst_does_not_herd_onto_one_pod(holding: TestClient) -> None:
    holding.put(f"/v1/policies/{policy_id(holding)}", json={"picker": "best_fit"})
    pods = [pod(f"p{i}", num_request_running=2, dispatched_requests=2) for i in range(3)]
    chosen = []
    for seed in range(3):
        out = schedule(holding, pods, ttft_slo_ms=2000, tpot_slo_ms=60, seed=seed)
        chosen.append(out["decision"]["chosen"])
    # Three identical pods as the router reports them, three decisions before any dispatch:
    # each sees the ones before it (with the default 0 hold all three would take one pod).
    assert sorted(chosen) == ["p0", "p1", "p2"]
    fourth = schedule(holding, pods, ttft_slo_ms=2000, tpot_slo_ms=60)
    ttft = {c["name"]: c["ttft_ms"] for c in fourth["decision"]["candidates"]}
    first = schedule(holding, [pod("p9", num_request_running=2, dispatched_requests=2)])
    fresh = first["decision"]["candidates"][0]["ttft_ms"]
    # A pod holding a 2,000-token prefill decided for it predicts a later first token.
    assert ttft[fourth["decision"]["chosen"]] > fresh


def test_without_a_hold_identical_calls_get_identical_answers(trained: TestClient) -> None:
    trained.put(f"/v1/policies/{policy_id(trained)}", json={"picker": "best_fit"})
    pods = [pod(f"p{i}", num_request_running=2) for i in range(3)]
    answers = {schedule(trained, pods, seed=s)["decision"]["chosen"] for s in range(3)}
    assert len(answers) == 1


def test_the_interference_scorer_predicts_the_pods_with_the_request_placed(
    trained: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scorer's second predictor call is on counterfactual pods: their own fields, not the
    # wire rows again (which would price no interference at all).
    asked: list[dict[str, Any]] = []
    real = routing_service.predict_both

    def spy(store: Any, pool: str, cols: Any) -> Any:
        asked.append({k: np.asarray(v).copy() for k, v in cols.items()})
        return real(store, pool, cols)

    monkeypatch.setattr(routing_service, "predict_both", spy)
    trained.put(f"/v1/policies/{policy_id(trained)}", json={"scorer": "interference"})
    pods = [
        pod(f"p{i}", num_request_running=3 * i, prefill_tokens_in_flight=1000 * i) for i in range(3)
    ]
    out = schedule(trained, pods, ttft_slo_ms=2000, tpot_slo_ms=60)
    assert not out["decision"]["fallback"]
    present, placed = asked
    assert list(present["prefill_tokens_in_flight"]) == [0, 1000, 2000]
    # The request's 2,000 uncached tokens are in flight on each pod, one more request with it.
    assert list(placed["prefill_tokens_in_flight"]) == [2000, 3000, 4000]
    assert list(placed["num_request_running"]) == [1, 4, 7]
    assert list(placed["pod_type"]) == list(present["pod_type"])
