"""EndpointPickerConfig export: the routerlib chart's pipeline with the policy's values."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from backend.scheduling import SchedulingPolicy
from backend.scheduling.epp_config import HeadroomOnly, epp_config, epp_config_yaml, headroom_only


def by_ref(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p.get("name", p["type"]): p for p in cfg["plugins"]}


def test_default_slo_pipeline_matches_the_chart() -> None:
    cfg = epp_config(SchedulingPolicy())
    assert cfg["apiVersion"] == "inference.networking.x-k8s.io/v1alpha1"
    assert cfg["kind"] == "EndpointPickerConfig"
    [profile] = cfg["schedulingProfiles"]
    assert profile["name"] == "default"
    assert [p["pluginRef"] for p in profile["plugins"]] == [
        "predicted-latency-producer",
        "strict-affinity-filter",
        "slo-headroom-tier-filter",
        "loose-affinity-filter",
        "latency-scorer",
        "weighted-random-picker",
    ]
    plugins = by_ref(cfg)
    assert "latency-slo-admitter" in plugins, "the admitter runs in request control"
    refs = {p["pluginRef"] for p in profile["plugins"]}
    assert refs <= set(plugins), "every profile reference names a declared plugin"


def test_default_parameters_equal_upstream_values() -> None:
    plugins = by_ref(epp_config(SchedulingPolicy()))
    for name, threshold in (("strict-affinity-filter", 0.99), ("loose-affinity-filter", 0.8)):
        assert plugins[name]["type"] == "prefix-cache-affinity-filter"
        assert plugins[name]["parameters"] == {
            "affinityThreshold": threshold,
            "explorationProbability": 0.01,
            "maxTTFTPenaltyMs": 5000.0,
            "ttftSource": "latencyPredictor",
        }
    assert plugins["latency-scorer"]["parameters"] == {
        "ttftWeight": 0.8,
        "tpotWeight": 0.2,
        "headroomSelectionStrategy": "least",
        "compositeKVWeight": 1.0,
        "compositeQueueWeight": 1.0,
        "compositePrefixWeight": 1.0,
    }
    assert plugins["slo-headroom-tier-filter"]["parameters"] == {"epsilonExploreNeg": 0.01}
    assert plugins["predicted-latency-producer"]["parameters"] == {
        "sloBufferFactor": 1.0,
        "streamingMode": True,
    }
    assert plugins["weighted-random-picker"]["parameters"] == {"maxNumOfEndpoints": 1}


def test_policy_edits_appear_in_the_config() -> None:
    policy = SchedulingPolicy(
        strategy="most",
        ttft_weight=0.6,
        epsilon_explore_neg=0.05,
        strict_affinity_threshold=0.95,
        loose_affinity_threshold=0.7,
        affinity_exploration_probability=0.0,
        max_ttft_penalty_ms=30000,
        slo_buffer_factor=1.2,
        fallback_queue_weight=3.0,
    )
    plugins = by_ref(epp_config(policy))
    assert plugins["latency-scorer"]["parameters"]["headroomSelectionStrategy"] == "most"
    assert plugins["latency-scorer"]["parameters"]["ttftWeight"] == 0.6
    assert plugins["latency-scorer"]["parameters"]["tpotWeight"] == 0.4
    assert plugins["latency-scorer"]["parameters"]["compositeQueueWeight"] == 3.0
    assert plugins["slo-headroom-tier-filter"]["parameters"]["epsilonExploreNeg"] == 0.05
    assert plugins["strict-affinity-filter"]["parameters"]["affinityThreshold"] == 0.95
    assert plugins["loose-affinity-filter"]["parameters"]["affinityThreshold"] == 0.7
    assert plugins["loose-affinity-filter"]["parameters"]["explorationProbability"] == 0.0
    assert plugins["loose-affinity-filter"]["parameters"]["maxTTFTPenaltyMs"] == 30000
    assert plugins["predicted-latency-producer"]["parameters"]["sloBufferFactor"] == 1.2


def test_routing_mode_exports_the_routing_only_chain() -> None:
    cfg = epp_config(SchedulingPolicy(mode="routing", streaming_mode=False))
    [profile] = cfg["schedulingProfiles"]
    assert [p["pluginRef"] for p in profile["plugins"]] == [
        "predicted-latency-producer",
        "loose-affinity-filter",
        "latency-scorer",
        "weighted-random-picker",
    ]
    plugins = by_ref(cfg)
    assert "slo-headroom-tier-filter" not in plugins and "latency-slo-admitter" not in plugins
    assert plugins["predicted-latency-producer"]["parameters"]["streamingMode"] is False


def test_yaml_round_trips_and_carries_no_headroom_only_keys() -> None:
    policy = SchedulingPolicy(picker="best_fit", pd_selection="joint")
    text = epp_config_yaml(
        policy, api_version="llm-d.ai/v1alpha1", endpoint_role_label="llm-d.ai/role"
    )
    cfg = yaml.safe_load(text)
    assert cfg == epp_config(
        policy, api_version="llm-d.ai/v1alpha1", endpoint_role_label="llm-d.ai/role"
    )
    assert set(cfg) == {"apiVersion", "kind", "plugins", "schedulingProfiles"}
    assert "best" not in text and "joint" not in text
    assert (
        by_ref(cfg)["predicted-latency-producer"]["parameters"]["endpointRoleLabel"]
        == "llm-d.ai/role"
    )


def test_headroom_only_options_are_reported_separately() -> None:
    extra = headroom_only(SchedulingPolicy(picker="best_fit", pd_selection="joint"))
    assert extra["picker"] == "best_fit" and extra["picker_upstream_equivalent"] is False
    assert extra["pd_selection"] == "joint" and extra["pd_selection_upstream_equivalent"] is False
    assert extra["expected_output_tokens"] == 256
    assert extra["kv_transfer"]["kv_bytes_per_token"] == 131072
    assert headroom_only(SchedulingPolicy())["picker_upstream_equivalent"] is True


def test_interference_scorer_is_headroom_only() -> None:
    policy = SchedulingPolicy(scorer="interference")
    # The exported chain is the same as with the upstream scorer: an EPP cannot run it.
    assert epp_config(policy) == epp_config(SchedulingPolicy())
    assert "interference" not in epp_config_yaml(policy)
    extra = headroom_only(policy)
    assert extra["scorer"] == "interference" and extra["scorer_upstream_equivalent"] is False
    assert headroom_only(SchedulingPolicy())["scorer_upstream_equivalent"] is True


def _profile_refs(cfg: dict[str, Any]) -> list[str]:
    [profile] = cfg["schedulingProfiles"]
    return [p["pluginRef"] for p in profile["plugins"]]


def test_llm_d_default_chain_exports_the_optimized_baseline_guide_with_its_parameters() -> None:
    policy = SchedulingPolicy(
        chain="llm-d-default",
        sticky_affinity_threshold=0.5,
        max_tokens_in_flight_penalty=65_536,
        queue_threshold_tokens=1_000_000,
        max_prefix_tokens_to_match=8192,
    )
    cfg = yaml.safe_load(epp_config_yaml(policy))
    assert cfg["kind"] == "EndpointPickerConfig"
    assert _profile_refs(cfg) == [
        "prefix-cache-affinity-filter",
        "token-load-scorer",
        "max-score-picker",
    ]
    plugins = by_ref(cfg)
    assert set(plugins) == {
        "token-load-scorer",
        "inflight-load-producer",
        "approx-prefix-cache-producer",
        "prefix-cache-affinity-filter",
        "max-score-picker",
    }
    assert plugins["prefix-cache-affinity-filter"]["parameters"] == {
        "affinityThreshold": 0.5,
        "maxTokensInFlightPenalty": 65_536,
        "maxTTFTPenaltyMs": 0,
        "explorationProbability": 0,
    }
    assert plugins["token-load-scorer"]["parameters"] == {"queueThresholdTokens": 1_000_000}
    assert plugins["approx-prefix-cache-producer"]["parameters"] == {"maxPrefixTokensToMatch": 8192}
    # No predicted-latency plugin: the chain runs on an EPP without Headroom's predictions.
    assert not any("latency" in t for t in plugins)


def test_llm_d_default_chain_defaults_equal_the_guide() -> None:
    plugins = by_ref(epp_config(SchedulingPolicy(chain="llm-d-default")))
    gate = plugins["prefix-cache-affinity-filter"]["parameters"]
    assert gate["affinityThreshold"] == 0.8 and gate["maxTokensInFlightPenalty"] == 286_720
    assert plugins["approx-prefix-cache-producer"]["parameters"] == {
        "maxPrefixTokensToMatch": 40_960
    }
    assert plugins["token-load-scorer"]["parameters"] == {"queueThresholdTokens": 4_194_304}


def test_load_prefix_chain_exports_the_weighted_scorers() -> None:
    policy = SchedulingPolicy(
        chain="load-prefix",
        load_prefix_queue_weight=1.0,
        load_prefix_kv_weight=0.5,
        load_prefix_prefix_weight=4.0,
    )
    cfg = yaml.safe_load(epp_config_yaml(policy))
    [profile] = cfg["schedulingProfiles"]
    weights = {p["pluginRef"]: p.get("weight") for p in profile["plugins"]}
    assert weights == {
        "queue-scorer": 1.0,
        "kv-cache-utilization-scorer": 0.5,
        "prefix-cache-scorer": 4.0,
        "max-score-picker": None,
    }
    plugins = by_ref(cfg)
    assert set(weights) <= set(plugins)
    assert "metrics-data-source" in plugins, "queue and KV scorers read scraped gauges"
    assert not any("latency" in t or "affinity" in t for t in plugins)


def test_lmetric_chain_has_no_epp_config() -> None:
    policy = SchedulingPolicy(chain="lmetric")
    with pytest.raises(HeadroomOnly, match="/v1/schedule"):
        epp_config(policy)
    assert headroom_only(policy) == {"chain": "lmetric", "chain_upstream_equivalent": False}


def test_exports_do_not_share_mutable_parts() -> None:
    first = epp_config(SchedulingPolicy(chain="load-prefix"))
    by_ref(first)["metrics-data-source"]["parameters"]["path"] = "/changed"
    again = by_ref(epp_config(SchedulingPolicy()))
    assert again["metrics-data-source"]["parameters"]["path"] == "/metrics"
