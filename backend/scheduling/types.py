"""The scheduling library's inputs, policy and decision.

Inputs mirror what the llm-d EPP knows about a request and its candidate pods; the policy's
defaults equal upstream llm-d's plugin defaults (routerlib chart values where the chart overrides
the code); the decision explains itself per candidate so the console can show why a pod won.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

Role = Literal["", "prefill", "decode"]
Distance = Literal["same_host", "same_rack", "same_zone", "same_region", "cross_region"]
DISTANCES: Final[tuple[Distance, ...]] = (
    "same_host",
    "same_rack",
    "same_zone",
    "same_region",
    "cross_region",
)
Tier = Literal["positive", "negative"]
Scorer = Literal["headroom", "interference", "interference_tpot", "interference_queue"]
SCORERS: Final[tuple[Scorer, ...]] = (
    "headroom",
    "interference",
    "interference_tpot",
    "interference_queue",
)
Chain = Literal["predicted-latency", "llm-d-default", "load-prefix", "lmetric"]
CHAINS: Final[tuple[Chain, ...]] = ("predicted-latency", "llm-d-default", "load-prefix", "lmetric")
"""The plugin chains a policy can name; ``lmetric`` is Headroom-only (no llm-d plugin computes
it: it needs ``/v1/schedule``), the others are what an unchanged EPP runs."""
EPP_CHAINS: Final[tuple[Chain, ...]] = ("predicted-latency", "llm-d-default", "load-prefix")
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Topology:
    """Where a pod runs; ``None`` at a level means unknown there."""

    host: str | None = None
    rack: str | None = None
    zone: str | None = None
    region: str | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidate pod: the predictor's wire features plus what routing needs besides."""

    name: str
    kv_cache_percentage: float  # a fraction in [0, 1], as vLLM's gauge and upstream's wire field
    input_token_length: int
    num_request_waiting: int
    num_request_running: int
    prefix_cache_score: float
    prefill_tokens_in_flight: int = 0
    decode_tokens_in_flight: int = 0
    num_tokens_generated: int = 1
    role: Role = ""
    pod_class: str | None = None
    topology: Topology | None = None
    dispatched_requests: int | None = None  # router's in-flight count; None -> num_request_running
    running_tpot_slos_ms: tuple[float, ...] = ()  # TPOT SLOs of requests already running there
    # Ours, optional wire fields (backend/predictor/features.py PROGRESS_FIELDS): how far the
    # pod's work has got, as a router proxying its streams sees it; 0 when not sent.
    ms_since_last_token: float = 0.0
    oldest_prefill_wait_ms: float = 0.0
    ms_since_last_first_token: float = 0.0

    @property
    def in_flight(self) -> int:
        """Requests in flight on the pod: the router's count, else the scraped running gauge."""
        return (
            self.num_request_running
            if self.dispatched_requests is None
            else self.dispatched_requests
        )


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    prompt_tokens: int
    ttft_slo_ms: float | None = None
    tpot_slo_ms: float | None = None
    priority: int = 0  # InferenceObjective priority; < 0 is sheddable
    stream: bool = True
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """KV-transfer cost between a prefill and a decode pod, per topology distance.

    The bandwidths are assumptions, not measurements: same host over PCIe/host memory rather than
    NVLink (upstream's P/D docs move KV between pods over RDMA, never NVLink), same rack over one
    200 Gb/s RDMA NIC, and progressively thinner pipes further out. The latencies are the fixed
    per-transfer cost (handshake, NIXL metadata, RTT). ``TransferModel`` replaces both with fits to
    observed transfers once it has samples.
    """

    kv_bytes_per_token: int = 131072  # Llama-3-8B: 2 (K,V) * 32 layers * 8 kv heads * 128 * 2 B
    same_host_gbps: float = 50.0  # GB/s (1e9 bytes per second)
    same_rack_gbps: float = 25.0
    same_zone_gbps: float = 6.0
    same_region_gbps: float = 2.0
    cross_region_gbps: float = 0.5
    same_host_latency_ms: float = 0.5
    same_rack_latency_ms: float = 1.0
    same_zone_latency_ms: float = 2.0
    same_region_latency_ms: float = 5.0
    cross_region_latency_ms: float = 40.0
    unknown_distance: Distance = "same_zone"  # pools usually live in one zone

    def __post_init__(self) -> None:
        if self.kv_bytes_per_token <= 0:
            raise ValueError("kv_bytes_per_token must be > 0")
        for d in DISTANCES:
            if not getattr(self, f"{d}_gbps") > 0:
                raise ValueError(f"{d}_gbps must be > 0")
            if not getattr(self, f"{d}_latency_ms") >= 0:
                raise ValueError(f"{d}_latency_ms must be >= 0")
        if self.unknown_distance not in DISTANCES:
            raise ValueError(f"unknown_distance must be one of {DISTANCES}")

    def bandwidth_gbps(self, distance: Distance) -> float:
        return float(getattr(self, f"{distance}_gbps"))

    def latency_ms(self, distance: Distance) -> float:
        return float(getattr(self, f"{distance}_latency_ms"))


@dataclass(frozen=True, slots=True)
class SchedulingPolicy:
    """How a pool routes. Defaults equal upstream's (routerlib chart / predicted-latency guides)."""

    # Which chain routes: the predicted-latency one (the fields below up to ``transfer``), or
    # one of the load chains of ``backend.scheduling.load_chains`` (the fields after it).
    chain: Chain = "predicted-latency"
    mode: Literal["routing", "slo"] = "slo"  # routing-only chain vs SLO-aware chain
    strategy: Literal["least", "most"] = "least"
    ttft_weight: float = 0.8  # TPOT weight = 1 - ttft_weight
    epsilon_explore_neg: float = 0.01
    strict_affinity_threshold: float = 0.99
    loose_affinity_threshold: float = 0.8
    affinity_exploration_probability: float = 0.01
    max_ttft_penalty_ms: float = 5000.0
    slo_buffer_factor: float = 1.0
    streaming_mode: bool = True  # the SLO guide's streamingMode; TPOT counts only when streaming
    picker: Literal["weighted_random", "best_fit"] = "weighted_random"
    fallback_kv_weight: float = 1.0
    fallback_queue_weight: float = 1.0
    fallback_prefix_weight: float = 1.0
    pd_selection: Literal["greedy", "joint"] = "greedy"  # greedy = upstream: D, then P apart
    expected_output_tokens: int = 256  # joint P/D: decode cost = tokens * predicted TPOT
    # headroom: upstream's latency-scorer; interference: also count the SLO misses a placement
    # causes to running (TPOT) and queued (TTFT) requests; the _tpot/_queue variants are its
    # ablations. Headroom-only: an EPP running the exported config scores by headroom.
    scorer: Scorer = "headroom"
    # What the SLO tier filter compares with the TPOT SLO: the mean prediction (upstream) or the
    # predictor's calibrated p90 where it gives one (a pod is "positive" only if 9 in 10 of its
    # requests would meet the SLO). Scoring always uses the mean.
    tpot_tier_quantile: Literal["mean", "p90"] = "mean"
    transfer: TransferConfig = field(default_factory=TransferConfig)
    # llm-d-default (the optimized-baseline guide's values): prefix-cache-affinity-filter's
    # affinityThreshold and maxTokensInFlightPenalty (0 disables the load gate),
    # token-load-scorer's queueThresholdTokens, approx-prefix-cache-producer's
    # maxPrefixTokensToMatch (the model's context; only the exported config uses it: a caller
    # of /v1/schedule sends the prefix scores).
    sticky_affinity_threshold: float = 0.8
    max_tokens_in_flight_penalty: int = 286_720
    queue_threshold_tokens: int = 4_194_304
    max_prefix_tokens_to_match: int = 40_960
    # load-prefix: the scorers' weights (GIE's chart and llm-d's code default, 2:2:3).
    load_prefix_queue_weight: float = 2.0
    load_prefix_kv_weight: float = 2.0
    load_prefix_prefix_weight: float = 3.0
    # lmetric: count the uncached tokens already dispatched and not yet prefilled; read the
    # batch size from the router's in-flight count or the scraped running gauge.
    lmetric_pending: bool = True
    lmetric_batch: Literal["inflight", "scraped"] = "inflight"

    def __post_init__(self) -> None:
        unit = (
            "ttft_weight",
            "epsilon_explore_neg",
            "strict_affinity_threshold",
            "loose_affinity_threshold",
            "affinity_exploration_probability",
            "sticky_affinity_threshold",
        )
        for name in unit:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name in ("fallback_kv_weight", "fallback_queue_weight", "fallback_prefix_weight"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"{name} must be >= 0")
        if not self.max_ttft_penalty_ms >= 0.0:
            raise ValueError("max_ttft_penalty_ms must be >= 0")
        if not self.slo_buffer_factor > 0.0:
            raise ValueError("slo_buffer_factor must be > 0")
        if self.expected_output_tokens < 1:
            raise ValueError("expected_output_tokens must be >= 1")
        if self.mode not in ("routing", "slo"):
            raise ValueError(f"unknown mode {self.mode!r}")
        if self.strategy not in ("least", "most"):
            raise ValueError(f"unknown strategy {self.strategy!r}")
        if self.picker not in ("weighted_random", "best_fit"):
            raise ValueError(f"unknown picker {self.picker!r}")
        if self.pd_selection not in ("greedy", "joint"):
            raise ValueError(f"unknown pd_selection {self.pd_selection!r}")
        if self.scorer not in SCORERS:
            raise ValueError(f"unknown scorer {self.scorer!r}")
        if self.tpot_tier_quantile not in ("mean", "p90"):
            raise ValueError(f"unknown tpot_tier_quantile {self.tpot_tier_quantile!r}")
        if self.chain not in CHAINS:
            raise ValueError(f"unknown chain {self.chain!r}")
        if self.max_tokens_in_flight_penalty < 0:
            raise ValueError("max_tokens_in_flight_penalty must be >= 0")
        if self.queue_threshold_tokens < 1:
            raise ValueError("queue_threshold_tokens must be >= 1")
        if self.max_prefix_tokens_to_match < 1:
            raise ValueError("max_prefix_tokens_to_match must be >= 1")
        weights = (
            self.load_prefix_queue_weight,
            self.load_prefix_kv_weight,
            self.load_prefix_prefix_weight,
        )
        if not all(w >= 0.0 for w in weights):
            raise ValueError("the load_prefix_*_weight fields must be >= 0")
        if self.chain == "load-prefix" and not any(w > 0.0 for w in weights):
            raise ValueError("the load-prefix chain needs a load_prefix_*_weight above 0")
        if self.lmetric_batch not in ("inflight", "scraped"):
            raise ValueError(f"unknown lmetric_batch {self.lmetric_batch!r}")

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__ if name != "transfer"}
        out["transfer"] = {name: getattr(self.transfer, name) for name in self.transfer.__slots__}
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SchedulingPolicy:
        """Inverse of ``to_dict``; missing keys take upstream's defaults."""
        fields = dict(data)
        transfer = fields.pop("transfer", None)
        if transfer is not None:
            fields["transfer"] = TransferConfig(**transfer)
        return cls(**fields)

    @property
    def tpot_weight(self) -> float:
        # Rounded so that the default is exactly upstream's 0.2, not 0.19999999999999996: the
        # scorer quantises to 1/100 and a last-bit difference can move a pod across a step.
        return round(1.0 - self.ttft_weight, 12)


Predictor = Callable[
    [Sequence[Candidate], SchedulingRequest],
    tuple[npt.ArrayLike, npt.ArrayLike] | tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike | None],
]
"""Returns (ttft_ms, tpot_ms), one entry per candidate, in order, optionally with a third array:
the calibrated TPOT p90 (``tpot_tier_quantile = "p90"`` uses it). May raise: the decision then
comes from the composite heuristic. A NaN entry means "no prediction for this pod"."""


@dataclass(frozen=True, slots=True)
class CandidateTrace:
    """What the chain saw and did for one pod."""

    name: str
    role: str
    pod_class: str | None
    profile: str  # "default", or "prefill" / "decode" under P/D
    ttft_ms: float | None
    tpot_ms: float | None
    ttft_headroom_ms: float | None
    tpot_headroom_ms: float | None
    combined_headroom_ms: float | None  # ttft_weight * TTFT headroom + tpot_weight * TPOT headroom
    valid: bool | None  # upstream IsValid: both predictions strictly below their SLOs
    tier: Tier | None  # by headroom sign; None without a prediction
    score: float | None  # None when a filter removed the pod before scoring
    removed_by: str | None
    transfer_ms: float | None = None  # P/D: predicted KV transfer to/from the chosen partner


@dataclass(frozen=True, slots=True)
class StepTrace:
    """One plugin's outcome, in chain order."""

    profile: str
    plugin: str
    outcome: str
    kept: int


@dataclass(frozen=True, slots=True)
class PDTrace:
    """Prefill/decode selection: the pair chosen and the pair upstream's greedy order picks.

    ``e2e_ms`` = predicted prefill TTFT + KV transfer + expected output tokens * predicted TPOT.
    """

    selection: Literal["greedy", "joint"]
    expected_output_tokens: int
    prefill: str | None
    decode: str | None
    distance: Distance | None
    kv_bytes: int | None
    transfer_ms: float | None
    e2e_ms: float | None
    meets_slo: bool | None
    greedy_prefill: str | None
    greedy_decode: str | None
    greedy_distance: Distance | None
    greedy_transfer_ms: float | None
    greedy_e2e_ms: float | None
    saved_ms: float | None  # greedy_e2e_ms - e2e_ms


@dataclass(frozen=True, slots=True)
class Decision:
    admitted: bool
    reason: str
    chosen: str | None  # the pod to route to (under P/D the decode pod, as upstream)
    prefill: str | None
    decode: str | None
    fallback: bool  # predictions unavailable: the composite heuristic decided
    mode: str
    picker: str
    candidates: tuple[CandidateTrace, ...]
    steps: tuple[StepTrace, ...]
    pd: PDTrace | None = None
    predictor_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (no tuples, no numpy scalars, no NaN)."""
        return {
            "admitted": self.admitted,
            "reason": self.reason,
            "chosen": self.chosen,
            "prefill": self.prefill,
            "decode": self.decode,
            "fallback": self.fallback,
            "mode": self.mode,
            "picker": self.picker,
            "predictor_error": self.predictor_error,
            "candidates": [_plain(c) for c in self.candidates],
            "steps": [_plain(s) for s in self.steps],
            "pd": None if self.pd is None else _plain(self.pd),
        }


def _plain(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in obj.__slots__:
        value = getattr(obj, name)
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[name] = value
    return out
