"""Policy and objective shapes. Defaults are a new pool's policy: upstream llm-d's values, read from
the scheduling library's own policy (`SchedulingPolicy`, `TransferConfig`), the one place they are
defined, except the strategy (`NEW_POOL_STRATEGY`). `UPSTREAM_SPEC` is upstream's values for every
field: the `upstream` preset."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator

from backend.pools.schemas import FREE_TEXT, POOL_NAME_PATTERN
from backend.scheduling.types import Chain, SchedulingPolicy, TransferConfig

_LIBRARY = SchedulingPolicy()
_TRANSFER = TransferConfig()

# Physical upper bounds: a value beyond them is a typo, and some (a KV size above 2^63 bytes)
# overflowed the int64 arithmetic of every P/D decision of the pool.
MAX_SLO_MS = 86_400_000.0  # a day; any latency above it is a unit mistake
MAX_KV_BYTES_PER_TOKEN = 2**24  # 16 MiB; a 405B model with full multi-head KV needs ~2 MiB
MAX_LINK_GBPS = 100_000.0  # 100 Tbit/s; an NVLink 5 domain is 14,400

# A new pool's strategy. Upstream ships `least`; under the fair protocol the same chain at `most`
# beat it on every suite (beyond the seed spread at several loads), and of the EPP-expressible
# policies it is the one chosen by the rule in docs/benchmarks.md, "New pools' default policy".
# The `upstream` preset (UPSTREAM_SPEC) puts `least` back.
NEW_POOL_STRATEGY: Final = "most"

# Headroom's shipped GPU profiles (backend/sim/profiles: measured step costs of a GPU serving a
# model), by name; "none" for pods that match none of them. Spelled out so that the policy's
# schema and the console's choice list are fixed in OpenAPI; a test holds it to the files.
GpuProfileName = Literal["none", "a100-llama2-7b", "a100-llama3-8b", "h100-llama2-7b"]


class PolicySpec(BaseModel):
    """Everything a platform team tunes for a pool's routing. Every field has upstream's default
    but `strategy` (`most`: docs/benchmarks.md, "New pools' default policy")."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    default_ttft_slo_ms: float | None = Field(
        None,
        gt=0,
        le=MAX_SLO_MS,
        description="TTFT SLO for requests without `x-llm-d-slo-ttft-ms`; none: no SLO.",
    )
    default_tpot_slo_ms: float | None = Field(
        None,
        gt=0,
        le=MAX_SLO_MS,
        description="TPOT SLO for requests without `x-llm-d-slo-tpot-ms`; none: no SLO.",
    )
    chain: Chain = Field(
        _LIBRARY.chain,
        description="The plugin chain that routes: predicted-latency (upstream's "
        "predicted-latency chain, served Headroom's predictions; the fields from `mode` to "
        "`tpot_tier_quantile`), llm-d-default (llm-d's optimized-baseline 'sticky until "
        "saturated' chain: prefix-cache-affinity-filter and token-load-scorer; the `sticky_*`, "
        "`max_tokens_in_flight_penalty`, `queue_threshold_tokens` and "
        "`max_prefix_tokens_to_match` fields), load-prefix (queue, kv-cache and prefix-cache "
        "scorers; the `load_prefix_*_weight` fields) or lmetric (new prefill tokens x batch "
        "size; Headroom-only: no llm-d plugin computes it, it needs /v1/schedule; the "
        "`lmetric_*` fields).",
    )
    mode: Literal["routing", "slo"] = Field(
        _LIBRARY.mode,
        description="routing: pick the lowest predicted latency; slo: the SLO-aware chain.",
    )
    strategy: Literal["least", "most"] = Field(
        NEW_POOL_STRATEGY,
        description="least: best fit (smallest headroom that meets the SLO; upstream's default); "
        "most: spread (a new pool's default).",
    )
    ttft_weight: float = Field(
        _LIBRARY.ttft_weight,
        ge=0,
        le=1,
        description="Weight of TTFT headroom; TPOT gets the rest (0.8 = 80/20).",
    )
    epsilon_explore_neg: float = Field(
        _LIBRARY.epsilon_explore_neg,
        ge=0,
        le=1,
        description="Chance to route into the tier that misses the SLO.",
    )
    strict_affinity_threshold: float = Field(
        _LIBRARY.strict_affinity_threshold,
        ge=0,
        le=1,
        description="Prefix score the strict affinity filter requires.",
    )
    loose_affinity_threshold: float = Field(
        _LIBRARY.loose_affinity_threshold,
        ge=0,
        le=1,
        description="Prefix score the loose affinity filter requires.",
    )
    affinity_exploration_probability: float = Field(
        _LIBRARY.affinity_exploration_probability,
        ge=0,
        le=1,
        description="Chance to skip the affinity gate and consider every pod.",
    )
    max_ttft_penalty_ms: float = Field(
        _LIBRARY.max_ttft_penalty_ms,
        ge=0,
        le=MAX_SLO_MS,
        description="Drop affinity when the best sticky pod is this much slower.",
    )
    slo_buffer_factor: float = Field(
        _LIBRARY.slo_buffer_factor, gt=0, le=10, description="Multiplier on the TPOT SLO."
    )
    picker: Literal["weighted_random", "best_fit"] = Field(
        _LIBRARY.picker,
        description="weighted_random: upstream's lottery; best_fit: deterministic.",
    )
    scorer: Literal["headroom", "interference", "interference_tpot", "interference_queue"] = Field(
        "headroom",
        description="headroom: upstream's latency-scorer; interference: also count the SLO "
        "misses a placement causes to running and queued requests (Headroom-only, needs "
        "/v1/schedule; interference_tpot / interference_queue: one term each).",
    )
    streaming_mode: bool = Field(
        _LIBRARY.streaming_mode,
        description="TPOT counts only for streamed requests (upstream's streamingMode).",
    )
    fallback_kv_weight: float = Field(
        _LIBRARY.fallback_kv_weight, ge=0, le=1, description="Heuristic fallback: free KV."
    )
    fallback_queue_weight: float = Field(
        _LIBRARY.fallback_queue_weight, ge=0, le=1, description="Heuristic: short queue."
    )
    fallback_prefix_weight: float = Field(
        _LIBRARY.fallback_prefix_weight, ge=0, le=1, description="Heuristic: prefix hits."
    )
    pd_selection: Literal["greedy", "joint"] = Field(
        _LIBRARY.pd_selection,
        description="P/D: greedy (upstream, D then P) or joint (pair incl. KV transfer).",
    )
    expected_output_tokens: int = Field(
        _LIBRARY.expected_output_tokens,
        ge=1,
        le=1_000_000,
        description="Joint P/D: decode cost = tokens x predicted TPOT.",
    )
    tpot_tier_quantile: Literal["mean", "p90"] = Field(
        "mean",
        description="What the SLO tier filter compares with the TPOT SLO: the mean prediction "
        "(upstream) or the calibrated p90 (a pod is in the positive tier only if about 9 in 10 "
        "of its requests would meet the SLO). Scoring always uses the mean.",
    )
    kv_bytes_per_token: int = Field(
        _TRANSFER.kv_bytes_per_token,
        ge=1,
        le=MAX_KV_BYTES_PER_TOKEN,
        description="KV-cache bytes per token of the model (Llama-3-8B: 131072).",
    )
    transfer_same_host_gbps: float = Field(
        _TRANSFER.same_host_gbps, gt=0, le=MAX_LINK_GBPS, description="KV transfer, same host."
    )
    transfer_same_rack_gbps: float = Field(
        _TRANSFER.same_rack_gbps, gt=0, le=MAX_LINK_GBPS, description="KV transfer, same rack."
    )
    transfer_same_zone_gbps: float = Field(
        _TRANSFER.same_zone_gbps, gt=0, le=MAX_LINK_GBPS, description="KV transfer, same zone."
    )
    transfer_same_region_gbps: float = Field(
        _TRANSFER.same_region_gbps, gt=0, le=MAX_LINK_GBPS, description="KV transfer, same region."
    )
    transfer_cross_region_gbps: float = Field(
        _TRANSFER.cross_region_gbps,
        gt=0,
        le=MAX_LINK_GBPS,
        description="KV transfer, cross region.",
    )
    sticky_affinity_threshold: float = Field(
        _LIBRARY.sticky_affinity_threshold,
        ge=0,
        le=1,
        description="llm-d-default: prefix score a pod needs to be sticky "
        "(prefix-cache-affinity-filter affinityThreshold).",
    )
    max_tokens_in_flight_penalty: int = Field(
        _LIBRARY.max_tokens_in_flight_penalty,
        ge=0,
        le=2**31 - 1,
        description="llm-d-default: keep every pod when the best sticky pod has this many more "
        "in-flight tokens than the best other one (maxTokensInFlightPenalty; 0: never).",
    )
    queue_threshold_tokens: int = Field(
        _LIBRARY.queue_threshold_tokens,
        ge=1,
        le=2**31 - 1,
        description="llm-d-default: token-load-scorer's queueThresholdTokens (tokens above it "
        "score alike).",
    )
    max_prefix_tokens_to_match: int = Field(
        _LIBRARY.max_prefix_tokens_to_match,
        ge=1,
        le=10_000_000,
        description="llm-d-default: approx-prefix-cache-producer's maxPrefixTokensToMatch (the "
        "model's context, vLLM --max-model-len). Exported only: /v1/schedule callers send "
        "prefix scores.",
    )
    load_prefix_queue_weight: float = Field(
        _LIBRARY.load_prefix_queue_weight,
        ge=0,
        le=100,
        description="load-prefix: queue-scorer weight.",
    )
    load_prefix_kv_weight: float = Field(
        _LIBRARY.load_prefix_kv_weight,
        ge=0,
        le=100,
        description="load-prefix: kv-cache-utilization-scorer weight.",
    )
    load_prefix_prefix_weight: float = Field(
        _LIBRARY.load_prefix_prefix_weight,
        ge=0,
        le=100,
        description="load-prefix: prefix-cache-scorer weight.",
    )
    lmetric_pending: bool = Field(
        _LIBRARY.lmetric_pending,
        description="lmetric: count the uncached tokens already dispatched to a pod and not yet "
        "prefilled (`prefill_tokens_in_flight`) as new prefill tokens too.",
    )
    lmetric_batch: Literal["inflight", "scraped"] = Field(
        _LIBRARY.lmetric_batch,
        description="lmetric: batch size from the router's in-flight count "
        "(`dispatched_requests`) or the scraped running gauge (`num_request_running`).",
    )
    target_slo_attainment: float = Field(
        0.95,
        ge=0.5,
        le=0.999,
        description="Share of requests to keep within SLO; desired replicas is the fewest pods "
        "the replayed traffic needs for it.",
    )
    gpu_profile: GpuProfileName = Field(
        "none",
        description="The pods' GPU and model, as one of Headroom's shipped profiles: the pool's "
        "replays (desired replicas, the advisor's pool replay) calibrate only its cost factors, "
        "and the desired-replicas gauge's `accelerator_type` is it. none: the calibration "
        "tries every shipped profile and keeps the one that reproduces the pool's latencies "
        "best (three times the calibration's simulations; a young window can pick a profile "
        "the pods are not).",
    )
    desired_plateau: float = Field(
        0.01,
        ge=0.0,
        le=0.5,
        description="Where the target is out of reach (or within this of what the most pods "
        "attain), desired replicas asks for the fewest pods within this share of the most "
        "pods' attainment: smaller aims closer to that ceiling, for more pods.",
    )

    @field_validator("load_prefix_prefix_weight")
    @classmethod
    def _some_load_prefix_weight(cls, value: float, info: ValidationInfo) -> float:
        # Checked on the last weight (fields validate in order, the chain and the other weights
        # are known by then), so the 422 names a field.
        data = info.data
        weights = (data.get("load_prefix_queue_weight"), data.get("load_prefix_kv_weight"), value)
        if data.get("chain") == "load-prefix" and not any(w for w in weights):
            raise ValueError(
                "the load-prefix chain needs load_prefix_queue_weight, load_prefix_kv_weight or "
                "load_prefix_prefix_weight above 0"
            )
        return value


UPSTREAM_SPEC: Final = PolicySpec(strategy=_LIBRARY.strategy)
"""Upstream llm-d's shipped value in every field (the `upstream` preset): its `to_scheduling` is the
scheduling library's `SchedulingPolicy()`."""

SERVICE_FIELDS: Final = frozenset(
    {
        "default_ttft_slo_ms",
        "default_tpot_slo_ms",
        "target_slo_attainment",
        "desired_plateau",
        "gpu_profile",
    }
)
"""The pool's SLOs, capacity targets and pods: the service's (saturation, desired replicas,
replays), not routing choices. The chain never sees them, and a routing preset leaves them
alone."""


class PolicyCreate(PolicySpec):
    pool: str = Field(pattern=POOL_NAME_PATTERN, description="Pool the policy governs (one each).")


# A write that names the version it was based on is refused (409) if the policy moved on since.
BASE_VERSION = Field(
    None,
    ge=1,
    le=2**31 - 1,
    description="The version this change was based on; if the record has changed since, "
    "nothing is saved and the answer is 409 with the current version.",
)


def _all_optional(model: type[BaseModel], name: str, doc: str) -> type[BaseModel]:
    """The same fields, each optional with no default: a partial update validates like the
    whole, and no field list is written twice. `base_version` is not a field of the spec."""
    fields: dict[str, Any] = {
        key: (Optional[info.annotation], Field(None, **_constraints(info)))  # noqa: UP045
        for key, info in model.model_fields.items()
    }
    fields["base_version"] = (Optional[int], BASE_VERSION)  # noqa: UP045
    config = ConfigDict(extra="forbid", allow_inf_nan=False)
    partial: type[BaseModel] = create_model(name, __config__=config, __doc__=doc, **fields)
    return partial


def _constraints(info: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"description": info.description}
    for meta in info.metadata:
        for key in ("gt", "ge", "lt", "le"):
            if getattr(meta, key, None) is not None:
                out[key] = getattr(meta, key)
    return out


PolicyUpdate = _all_optional(
    PolicySpec, "PolicyUpdate", "Only the fields given change; the rest keep their values."
)


class PolicyRead(BaseModel):
    id: int
    pool: str
    version: int
    spec: PolicySpec
    updated_at: datetime
    updated_by: str


class PolicyChange(BaseModel):
    version: int
    action: Literal["create", "update", "restore"]
    changed_at: datetime
    changed_by: str
    changes: dict[str, tuple[Any, Any]] = Field(description="field -> [old, new]")
    spec: PolicySpec = Field(description="The whole policy as of this version.")


class ObjectiveCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pool: str = Field(pattern=POOL_NAME_PATTERN)
    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$",
        description="InferenceObjective name, as in the `x-llm-d-inference-objective` header.",
    )
    priority: int = Field(
        0, ge=-(2**31), le=2**31 - 1, description="Higher is more critical; < 0 is sheddable."
    )
    description: str = Field("", max_length=500, pattern=FREE_TEXT)


class ObjectiveUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    priority: int | None = Field(None, ge=-(2**31), le=2**31 - 1)
    description: str | None = Field(None, max_length=500, pattern=FREE_TEXT)
    base_version: int | None = BASE_VERSION


class ObjectiveRead(BaseModel):
    id: int
    pool: str
    name: str
    priority: int
    sheddable: bool
    description: str
    version: int = Field(description="Counts the changes; send it as `base_version` to edit.")
    updated_at: datetime
    updated_by: str
