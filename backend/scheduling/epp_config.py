"""The llm-d router's EndpointPickerConfig for a policy: what the platform team applies.

One config per chain the policy names (``SchedulingPolicy.chain``):

* ``predicted-latency``: the routerlib chart's predicted-latency pipeline
  (``templates/_config.yaml``) and the predicted-latency guides' overrides, with the policy's
  values written out explicitly: the plugins' code defaults have drifted from the chart's
  (``maxTTFTPenaltyMs`` 18000, ``explorationProbability`` 0, ``ttftSource``
  prefillThroughput), so nothing may be left to them.
* ``llm-d-default``: llm-d's optimized-baseline guide (llm-d/llm-d ``guides/optimized-baseline/
  router/optimized-baseline.values.yaml`` 0a3b0c93): ``token-load-scorer``,
  ``inflight-load-producer``, ``approx-prefix-cache-producer`` (``maxPrefixTokensToMatch``) and
  ``prefix-cache-affinity-filter`` (``affinityThreshold``, ``maxTokensInFlightPenalty``, the TTFT
  gate off with ``maxTTFTPenaltyMs: 0``); written out besides: ``explorationProbability: 0`` (the
  chain Headroom runs never explores), ``queueThresholdTokens`` and the ``max-score-picker`` the
  EPP would otherwise inject.
* ``load-prefix``: GIE's and llm-d's scorer chain (``queue-scorer``,
  ``kv-cache-utilization-scorer``, ``prefix-cache-scorer``, weighted, ``max-score-picker``),
  with the metrics plugins the chart instantiates for the queue and KV gauges.
* ``lmetric`` has no EPP config: no upstream plugin computes its score (:class:`HeadroomOnly`).

The Go loader decodes strictly (unknown keys are errors), so options with no upstream plugin (the
best-fit picker, joint P/D selection, the interference scorer) stay out of it;
:func:`headroom_only` returns them.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import yaml

from backend.scheduling.types import SchedulingPolicy

API_VERSION: Final = "inference.networking.x-k8s.io/v1alpha1"
"""Accepted by llm-d-router and GAIE; llm-d-router logs it as deprecated in favour of
``llm-d.ai/v1alpha1`` (pass ``api_version`` to emit that)."""
KIND: Final = "EndpointPickerConfig"


class HeadroomOnly(ValueError):
    """The policy's chain has no upstream plugins: only Headroom's /v1/schedule runs it."""


METRICS_PLUGINS: Final = (
    {
        "type": "metrics-data-source",
        "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True},
    },
    {"type": "core-metrics-extractor"},
)


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
    """The EndpointPickerConfig as a dict (plugins, then the ``default`` scheduling profile).

    Raises :class:`HeadroomOnly` for a chain no upstream plugin implements (``lmetric``)."""
    if policy.chain == "lmetric":
        raise HeadroomOnly(
            "the lmetric chain is Headroom-only: no llm-d plugin computes LMetric's score, so no "
            "EndpointPickerConfig can express it; route with Headroom's /v1/schedule"
        )
    if policy.chain == "llm-d-default":
        plugins, chain = _sticky_until_saturated(policy)
    elif policy.chain == "load-prefix":
        plugins, chain = _load_prefix(policy)
    else:
        plugins, chain = _predicted_latency(policy, endpoint_role_label)
    return {
        "apiVersion": api_version,
        "kind": KIND,
        "plugins": plugins,
        "schedulingProfiles": [{"name": "default", "plugins": chain}],
    }


Plugins = list[dict[str, Any]]


def _sticky_until_saturated(policy: SchedulingPolicy) -> tuple[Plugins, Plugins]:
    plugins: Plugins = [
        {
            "type": "token-load-scorer",
            "parameters": {"queueThresholdTokens": policy.queue_threshold_tokens},
        },
        # Emits the in-flight load and uncached tokens the scorer and the filter's gate read.
        {"type": "inflight-load-producer"},
        {
            "type": "approx-prefix-cache-producer",
            "parameters": {"maxPrefixTokensToMatch": policy.max_prefix_tokens_to_match},
        },
        {
            "type": "prefix-cache-affinity-filter",
            "parameters": {
                "affinityThreshold": policy.sticky_affinity_threshold,
                "maxTokensInFlightPenalty": policy.max_tokens_in_flight_penalty,
                "maxTTFTPenaltyMs": 0,
                "explorationProbability": 0,
            },
        },
        {"type": "max-score-picker"},
    ]
    chain: Plugins = [
        {"pluginRef": "prefix-cache-affinity-filter"},
        {"pluginRef": "token-load-scorer", "weight": 1},
        {"pluginRef": "max-score-picker"},
    ]
    return plugins, chain


def _load_prefix(policy: SchedulingPolicy) -> tuple[Plugins, Plugins]:
    plugins: Plugins = [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        *copy.deepcopy(METRICS_PLUGINS),
        {"type": "max-score-picker"},
    ]
    chain: Plugins = [
        {"pluginRef": "queue-scorer", "weight": policy.load_prefix_queue_weight},
        {"pluginRef": "kv-cache-utilization-scorer", "weight": policy.load_prefix_kv_weight},
        {"pluginRef": "prefix-cache-scorer", "weight": policy.load_prefix_prefix_weight},
        {"pluginRef": "max-score-picker"},
    ]
    return plugins, chain


def _predicted_latency(
    policy: SchedulingPolicy, endpoint_role_label: str
) -> tuple[Plugins, Plugins]:
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
    plugins: Plugins = [
        {"type": "queue-scorer"},
        {"type": "kv-cache-utilization-scorer"},
        {"type": "prefix-cache-scorer"},
        *copy.deepcopy(METRICS_PLUGINS),
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
        chain: Plugins = [
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
    return plugins, chain


def epp_config_yaml(
    policy: SchedulingPolicy, *, api_version: str = API_VERSION, endpoint_role_label: str = ""
) -> str:
    cfg = epp_config(policy, api_version=api_version, endpoint_role_label=endpoint_role_label)
    return yaml.safe_dump(cfg, sort_keys=False)


def headroom_only(policy: SchedulingPolicy) -> dict[str, Any]:
    """The policy's options that no upstream plugin implements; Headroom's /v1/schedule applies
    them, an EPP running the config above does not."""
    if policy.chain != "predicted-latency":
        # The predicted chain's options do not apply to a load chain; lmetric as a whole is
        # Headroom-only.
        return {"chain": policy.chain, "chain_upstream_equivalent": policy.chain != "lmetric"}
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
