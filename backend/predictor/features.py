"""Feature matrices for the TTFT and TPOT models, built from columnar wire fields.

Input is ``cols``: upstream wire field name -> 1-D numpy array (one entry per row). The derived
columns carry the physics the models lean on: prefill work grows with the *uncached* prompt tokens
(linear for the GEMMs, quadratic for attention), queueing with the prefill work already admitted
ahead of the request, decode steps with the batch size and the KV bytes each step reads.

``*_BASE_FEATURES`` name the cost drivers of the hybrid model's non-negative linear base; these
are the columns along which predictions must keep growing outside the training range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

Target = Literal["ttft", "tpot"]
Columns = Mapping[str, npt.NDArray[Any]]
FeatureMatrix = npt.NDArray[np.float32]

POD_TYPE_CODES: Final[Mapping[str, int]] = {"": 0, "prefill": 1, "decode": 2, "encode": 3}
"""The pod classes the models know, by their canonical name (the feature column's values)."""

POD_ROLE_CODES: Final[Mapping[str, int]] = {
    **POD_TYPE_CODES,
    # llm-d.ai/role values: a pod serving both phases behaves like a monolithic one, and the
    # multimodal roles share the encoder's cost profile, which no text-only class has.
    "prefill-decode": 0,
    "both": 0,
    "encode-prefill": 3,
    "encode-prefill-decode": 3,
}
"""Every role value the EPP may send as ``pod_type`` (the raw ``llm-d.ai/role`` label) -> code."""

UNKNOWN_ROLE_CODE: Final = 0
"""An unrecognised role is read as a pod serving both phases: the behaviour of a pod without a
role label, which the model has seen most of."""

ATTENTION_WEIGHT: Final = 0.12
"""Upper bound on prefill attention cost per 1000 token pairs, relative to the linear layers'
cost per token.

Prompts within the training range cannot tell attention's quadratic growth apart from the
launch-bound flattening of short prefills (both bend the curve upwards), so an unconstrained
quadratic fitted on prompts <= 1024 tokens overshoots longer ones by 10-30 %. FLOP counting puts
the ratio at ``1000 / (6 * d_model)`` divided by the attention kernel's relative efficiency:
0.04 / ~0.5 for an 8B model. The base uses ``uncached_tokens`` and ``prefill_compute_tokens =
uncached + ATTENTION_WEIGHT * attention_kpairs`` with non-negative weights, which is exactly the
constraint ``0 <= attention slope <= ATTENTION_WEIGHT * token slope``.
"""

REQUIRED_FIELDS: Final = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
)
FEATURE_FIELDS: Final = (
    *REQUIRED_FIELDS,
    "prefix_cache_score",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "num_tokens_generated",
    "pod_type",
    "encoder_input_size",
    "encoder_matched_size",
    "ms_since_last_token",
    "oldest_prefill_wait_ms",
)
"""Wire fields read; all but ``REQUIRED_FIELDS`` default to 0 when a column is absent."""

PROGRESS_FIELDS: Final = ("ms_since_last_token", "oldest_prefill_wait_ms")
"""Ours, optional: what a router that proxies the pod's streams knows of its progress and
upstream's wire does not carry (issue 17). ``ms_since_last_token``: how long since the pod last
streamed a token to any request (a decoding pod streams at every iteration, so this is how far
into the iteration in progress it is); ``oldest_prefill_wait_ms``: how long the oldest request
dispatched to the pod and still without its first token has been there (how far its prefill
has got). Both 0 on a pod with nothing in flight, and from a router that does not send them,
so a model trained without them is unchanged. They tell where the pod's work stands, not how
much there is, so they enter the trees only: no cost in the extrapolating base grows with them."""

TTFT_FEATURES: Final = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefix_cache_score",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "pod_type",
    "pod_class_code",
    "uncached_tokens",
    "cached_tokens",
    "attention_kpairs",
    "prefill_compute_tokens",
    "running_x_uncached_k",
    "encoder_uncached_tokens",
    *PROGRESS_FIELDS,
)
TTFT_BASE_FEATURES: Final = (
    "uncached_tokens",
    "prefill_compute_tokens",
    "prefill_tokens_in_flight",
    "num_request_waiting",
    "num_request_running",
    "running_x_uncached_k",
    "decode_tokens_in_flight",
    "kv_cache_percentage",
    "encoder_uncached_tokens",
)

TPOT_FEATURES: Final = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "num_tokens_generated",
    "pod_type",
    "pod_class_code",
    "context_tokens",
)
TPOT_BASE_FEATURES: Final = (
    "num_request_running",
    "decode_tokens_in_flight",
    "kv_cache_percentage",
    "prefill_tokens_in_flight",
    "context_tokens",
)


def _rows(cols: Columns) -> int:
    for name in REQUIRED_FIELDS:
        if name not in cols:
            raise ValueError(f"missing feature column {name!r}")
    return int(np.shape(cols["input_token_length"])[0])


def _get(cols: Columns, name: str) -> npt.NDArray[np.float64] | float:
    """A column as float64, or the scalar 0.0 for an absent optional field (broadcasts)."""
    value = cols.get(name)
    if value is None:
        return 0.0
    return np.asarray(value, dtype=np.float64)


def _matrix(n: int, names: tuple[str, ...], values: Mapping[str, Any]) -> FeatureMatrix:
    out = np.empty((n, len(names)), dtype=np.float32)
    for j, name in enumerate(names):
        out[:, j] = values[name]
    return out


def ttft_features(cols: Columns) -> FeatureMatrix:
    """``(n, len(TTFT_FEATURES))`` float32 matrix, columns in ``TTFT_FEATURES`` order."""
    n = _rows(cols)
    prompt = _get(cols, "input_token_length")
    prefix = np.clip(_get(cols, "prefix_cache_score"), 0.0, 1.0)
    uncached = prompt * (1.0 - prefix)
    cached = prompt - uncached
    # Each new token attends to every token before it: cached ones plus half the new ones.
    attention = uncached * (cached + 0.5 * uncached) * 1e-3
    running = _get(cols, "num_request_running")
    encoder = np.maximum(_get(cols, "encoder_input_size") - _get(cols, "encoder_matched_size"), 0.0)
    values = {
        "kv_cache_percentage": _get(cols, "kv_cache_percentage"),
        "input_token_length": prompt,
        "num_request_waiting": _get(cols, "num_request_waiting"),
        "num_request_running": running,
        "prefix_cache_score": prefix,
        "prefill_tokens_in_flight": _get(cols, "prefill_tokens_in_flight"),
        "decode_tokens_in_flight": _get(cols, "decode_tokens_in_flight"),
        "pod_type": _get(cols, "pod_type"),
        "pod_class_code": _get(cols, "pod_class_code"),
        "uncached_tokens": uncached,
        "cached_tokens": cached,
        "attention_kpairs": attention,
        "prefill_compute_tokens": uncached + ATTENTION_WEIGHT * attention,
        # With chunked prefill the prompt is spread over steps that also carry the decode batch.
        "running_x_uncached_k": running * uncached * 1e-3,
        "encoder_uncached_tokens": encoder,
        "ms_since_last_token": _get(cols, "ms_since_last_token"),
        "oldest_prefill_wait_ms": _get(cols, "oldest_prefill_wait_ms"),
    }
    return _matrix(n, TTFT_FEATURES, values)


def tpot_features(cols: Columns) -> FeatureMatrix:
    """``(n, len(TPOT_FEATURES))`` float32 matrix, columns in ``TPOT_FEATURES`` order."""
    n = _rows(cols)
    prompt = _get(cols, "input_token_length")
    generated = _get(cols, "num_tokens_generated")
    values = {
        "kv_cache_percentage": _get(cols, "kv_cache_percentage"),
        "input_token_length": prompt,
        "num_request_waiting": _get(cols, "num_request_waiting"),
        "num_request_running": _get(cols, "num_request_running"),
        "prefill_tokens_in_flight": _get(cols, "prefill_tokens_in_flight"),
        "decode_tokens_in_flight": _get(cols, "decode_tokens_in_flight"),
        "num_tokens_generated": generated,
        "pod_type": _get(cols, "pod_type"),
        "pod_class_code": _get(cols, "pod_class_code"),
        # The request's own KV that every decode step reads.
        "context_tokens": prompt + generated,
    }
    return _matrix(n, TPOT_FEATURES, values)


def feature_names(target: Target) -> tuple[str, ...]:
    return TTFT_FEATURES if target == "ttft" else TPOT_FEATURES


def base_feature_names(target: Target) -> tuple[str, ...]:
    return TTFT_BASE_FEATURES if target == "ttft" else TPOT_BASE_FEATURES


def feature_matrix(target: Target, cols: Columns) -> FeatureMatrix:
    return ttft_features(cols) if target == "ttft" else tpot_features(cols)


def normalise_role(value: str) -> str:
    """``" Prefill_Decode "`` -> ``"prefill-decode"``: label values spelt another way."""
    return value.strip().lower().replace("_", "-")


def is_known_role(value: str | None) -> bool:
    return not value or normalise_role(value) in POD_ROLE_CODES


def pod_role_code(value: str | None) -> int:
    """A wire ``pod_type`` (None counts as "") -> the code the models use; unknown roles get
    ``UNKNOWN_ROLE_CODE`` instead of an error, so that no batch is lost over a new label."""
    if not value:
        return 0
    code = POD_ROLE_CODES.get(value)
    if code is None:
        code = POD_ROLE_CODES.get(normalise_role(value), UNKNOWN_ROLE_CODE)
    return code


def pod_type_codes(values: Iterable[str | None]) -> npt.NDArray[np.int8]:
    """Wire ``pod_type`` strings -> the int codes the models use."""
    return np.asarray([pod_role_code(v) for v in values], dtype=np.int8)


UNKNOWN_CLASS = 0
"""Code of a pod class the model has not seen (or none given): the pool-wide behaviour."""


def class_vocabulary(values: Iterable[str | None] | None) -> tuple[str, ...]:
    """The pod classes (GPU type / runtime) present in training data, in a stable order."""
    if values is None:
        return ()
    return tuple(sorted({v for v in values if v}))


def pod_class_codes(
    values: Iterable[str | None] | None, vocabulary: tuple[str, ...], n: int
) -> npt.NDArray[np.float64]:
    """Class names -> codes by a model's own vocabulary; unknown classes get UNKNOWN_CLASS."""
    if values is None or not vocabulary:
        return np.zeros(n, dtype=np.float64)
    index = {name: i + 1 for i, name in enumerate(vocabulary)}
    return np.fromiter((index.get(v, UNKNOWN_CLASS) if v else 0 for v in values), np.float64, n)
