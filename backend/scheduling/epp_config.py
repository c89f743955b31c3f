"""The llm-d router's EndpointPickerConfig for a policy: what the platform team applies.

Reproduces the routerlib chart's predicted-latency pipeline (``templates/_config.yaml``) and the
predicted-latency guides' overrides, with the policy's values written out explicitly: the plugins'
code defaults have drifted from the chart's (``maxTTFTPenaltyMs`` 18000, ``explorationProbability``
0, ``ttftSource`` prefillThroughput), so nothing may be left to them.

The Go loader decodes strictly (unknown keys are errors), so options with no upstream plugin (the
best-fit picker, joint P/D selection, the interference scorer) stay out of it;
:func:`headroom_only` returns them.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from backend.scheduling.types import SchedulingPolicy

API_VERSION: Final = "inference.networking.x-k8s.io/v1alpha1"
"""Accepted by llm-d-router and GAIE; llm-d-router logs it as deprecated in favour of
``llm-d.ai/v1alpha1`` (pass ``api_version`` to emit that)."""
KIND: Final = "EndpointPickerConfig"


def _affinity(name: str, threshold: float, policy: SchedulingPolicy) -> dict[str, Any]:
    return {
        "name": name,
        "type": "prefix-cache-affinity-filter",
        "parameters": {
            "affinityThreshold": threshold,
            "explorationProbability": policy.affinity_exploration_probability,
            "maxTTFTPenaltyMs": policy.max_ttft_penalty_ms,
            "ttftSource": "latencyPredictor",
        },
    }


def epp_config(
    policy: SchedulingPolicy, *, api_version: str = API_VERSION, endpoint_role_label: str = ""
) -> dict[str, Any]:
    """The EndpointPickerConfig as a dict (plugins, then the ``default`` scheduling profile)."""
    producer_params: dict[str, Any] = {
        "sloBufferFactor": policy.slo_buffer_factor,
        "streamingMode": policy.streaming_mode,
    }
    if endpoint_role_label:
        producer_params["endpointRoleLabel"] = endpoint_role_label
    scorer = {
        "type": "latency-scorer",
        "parameters": {
            "ttftWeight": policy.ttft_weight,
            "tpotWeight": policy.tpot_weight,
            "headroomSelectionStrategy": policy.strategy,
            "compositeKVWeight": policy.fallback_kv_weight,
            "compositeQueueWeight": policy.fallback_queue_weight,
            "compositePrefixWeight": policy.fallback_prefix_weight,
        },
    }
    # The chart always instantiates these: metrics scraping feeds KV/queue, and the prefix-cache
    # scorer produces the PrefixCacheMatchInfo the affinity filters and the producer read.
    plugins: list[dict[str, Any]] = [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        {
            "type": "metrics-data-source",
            "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True},
        },
        {"type": "core-metrics-extractor"},
        {"type": "predicted-latency-producer", "parameters": producer_params},
    ]
    loose = _affinity("loose-affinity-filter", policy.loose_affinity_threshold, policy)
    picker = {"type": "weighted-random-picker", "parameters": {"maxNumOfEndpoints": 1}}
    if policy.mode == "slo":
        plugins += [
            _affinity("strict-affinity-filter", policy.strict_affinity_threshold, policy),
            loose,
            scorer,
            picker,
            {
                "type": "slo-headroom-tier-filter",
                "parameters": {"epsilonExploreNeg": policy.epsilon_explore_neg},
            },
            {"type": "latency-slo-admitter"},
        ]
        chain = [
            {"pluginRef": "predicted-latency-producer"},
            {"pluginRef": "strict-affinity-filter"},
            {"pluginRef": "slo-headroom-tier-filter"},
            {"pluginRef": "loose-affinity-filter"},
            {"pluginRef": "latency-scorer", "weight": 1},
            {"pluginRef": "weighted-random-picker"},
        ]
    else:
        plugins += [loose, scorer, picker]
        chain = [
            {"pluginRef": "predicted-latency-producer"},
            {"pluginRef": "loose-affinity-filter"},
            {"pluginRef": "latency-scorer", "weight": 1},
            {"pluginRef": "weighted-random-picker"},
        ]
    return {
        "apiVersion": api_version,
        "kind": KIND,
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": chain}],
    }


def epp_config_yaml(
    policy: SchedulingPolicy, *, api_version: str = API_VERSION, endpoint_role_label: str = ""
) -> str:
    cfg = epp_config(policy, api_version=api_version, endpoint_role_label=endpoint_role_label)
    return yaml.safe_dump(cfg, sort_keys=False)


def headroom_only(policy: SchedulingPolicy) -> dict[str, Any]:
    """The policy's options that no upstream plugin implements; Headroom's /v1/schedule applies
    them, an EPP running the config above does not."""
    t = policy.transfer
    return {
        "picker": policy.picker,
        "picker_upstream_equivalent": policy.picker == "weighted_random",
        "pd_selection": policy.pd_selection,
        "pd_selection_upstream_equivalent": policy.pd_selection == "greedy",
        # Not exportable: an EPP running the config above scores by headroom alone.
        "scorer": policy.scorer,
        "scorer_upstream_equivalent": policy.scorer == "headroom",
        "expected_output_tokens": policy.expected_output_tokens,
        "tpot_tier_quantile": policy.tpot_tier_quantile,
        "tpot_tier_quantile_upstream_equivalent": policy.tpot_tier_quantile == "mean",
        "kv_transfer": {name: getattr(t, name) for name in t.__slots__},
    }
