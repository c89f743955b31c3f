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
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from backend.predictor.regressors import Kind

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
    "ms_since_last_first_token",
)
"""Wire fields read; all but ``REQUIRED_FIELDS`` default to 0 when a column is absent."""

PROGRESS_FIELDS: Final = (
    "ms_since_last_token",
    "oldest_prefill_wait_ms",
    "ms_since_last_first_token",
)
"""Ours, optional: what a router that proxies the pod's streams knows of its progress and
upstream's wire does not carry (issue 17). ``ms_since_last_token``: how long since the pod last
streamed a token to any request (a decoding pod streams at every iteration, so this is how far
into the iteration in progress it is); ``oldest_prefill_wait_ms``: how long the oldest request
dispatched to the pod and still without its first token has been there (how far its prefill
has got). Both 0 on a pod with nothing in flight, and from a router that does not send them,
so a model trained without them is unchanged. ``ms_since_last_first_token``: how long since
the pod last streamed a request's *first* token (a prefill finished; 0 when it never has), which
with the oldest wait dates the start of the prefills it holds now (``prefill_busy_ms``). They
tell where the pod's work stands, not how much there is, so they enter the trees only: no cost
in the extrapolating base grows with them (the base's ``prefill_left`` shrinks as they grow)."""

PREFILL_RATE_COLUMN: Final = "prefill_rate"
"""Not a wire field: the pod's prefill rate in uncached tokens per ms, which a model measured on
its own training window (``measure_prefill_rates``) and puts in per row by the pod's class
(``backend/predictor/training.py``), as it does ``pod_class_code``. 0 where unknown."""

WIRE_LOADS: Final = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
)
"""The wire's prompt and load fields, in the order upstream's models and our TPOT model read."""

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
    "ms_since_last_token",
    "oldest_prefill_wait_ms",
    "prefill_busy_ms",
    "prefill_left",
)
UPSTREAM_TTFT_FEATURES: Final = (
    "is_queued",
    *WIRE_LOADS,
    "encoder_matched_size",
    "encoder_input_size",
    "prefix_cache_score",
    "effective_input_tokens",
    "prefill_score_bucket",
    "pod_type",
)
"""The plain XGBoost kind's TTFT columns: upstream's training server's (v0.9.0, with
tokens-in-flight and encoder features on), in the order it trains on. The kind stands for
upstream's model, so it gets upstream's columns and none of ours: our derived columns would
lend it physics upstream does not have, and every column we add would move it (its trees sample
80 % of the columns). ``prefill_score_bucket`` and ``pod_type`` are categorical upstream; here
they are their small integer codes, which depth-6 trees split as finely."""

UPSTREAM_TPOT_FEATURES: Final = ("is_queued", *WIRE_LOADS, "num_tokens_generated", "pod_type")
"""Upstream's TPOT columns, in its order (see ``UPSTREAM_TTFT_FEATURES``)."""

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
    "prefill_left",
)

TPOT_FEATURES: Final = (
    *WIRE_LOADS,
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
    in_flight = _get(cols, "prefill_tokens_in_flight")
    busy = prefill_busy_ms(cols)
    values = {
        "kv_cache_percentage": _get(cols, "kv_cache_percentage"),
        "input_token_length": prompt,
        "num_request_waiting": _get(cols, "num_request_waiting"),
        "num_request_running": running,
        "prefix_cache_score": prefix,
        "prefill_tokens_in_flight": in_flight,
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
        "prefill_busy_ms": busy,
        # Of the uncached prompt tokens in flight (each prompt whole until its first token) a
        # pod prefilling FCFS has done about rate x busy time. The rate is the model's own lower
        # bound, so this is at least the work truly left: never optimistic, and the whole count
        # where the rate or the progress is unknown.
        "prefill_left": np.maximum(in_flight - _get(cols, PREFILL_RATE_COLUMN) * busy, 0.0),
    }
    return _matrix(n, TTFT_FEATURES, values)


def prefill_busy_ms(cols: Columns) -> npt.NDArray[np.float64] | float:
    """How long the pod has been prefilling the requests it holds before their first token: since
    the later of the oldest one's dispatch and the pod's last first token (the prefills finished
    before then were other requests'). Where the last first token is not known (0), since the
    oldest one's dispatch; 0 on a pod with none in flight, or from a router sending neither."""
    oldest = _get(cols, "oldest_prefill_wait_ms")
    since_first = _get(cols, "ms_since_last_first_token")
    return np.where(np.asarray(since_first) > 0.0, np.minimum(oldest, since_first), oldest)


PREFILL_RATE_MIN_TOKENS: Final = 256
"""A sample measures the prefill rate only with at least this many uncached tokens: below, the
step's fixed costs outweigh the prompt's."""

PREFILL_RATE_MIN_ROWS: Final = 20
"""Fewest such samples behind a measured rate (of a class, or of the pool)."""

PREFILL_RATE_MIN_WINDOW: Final = 500
"""Fewest training rows a model needs before it is given a rate at all: one window bucket's
cap (``WindowSettings.cap``). The rate itself settles within a few fits; what a young model
does with it does not. Fitted on a few hundred rows, the model leaned on the estimate and read
a cold Mooncake pool optimistic for its first two minutes (docs/benchmarks.md, "The prefill
work left ahead at a measured rate"); below this, ``prefill_left`` is the whole count, as
without an estimate."""

POOL_RATE: Final = ""
"""``measure_prefill_rates``' key for the pool-wide rate, used for a class with too few rows."""


def measure_prefill_rates(
    cols: Columns, ttft_ms: npt.ArrayLike, rows: npt.ArrayLike
) -> dict[str, float]:
    """The pods' prefill rate in uncached tokens per ms, per pod class and pool-wide
    (``POOL_RATE``), from the TTFT samples among ``rows`` taken with nothing else waiting or
    prefilling on the pod: their uncached tokens over their TTFTs, summed.

    A TTFT also carries the decode work sharing the pod's steps and its fixed costs, so this is a
    lower bound of the pure prefill rate, measured on the pool's own traffic: ``prefill_left``
    from it is at least the true work left. An estimate that cannot run ahead of the data: a
    grid of assumed rates let a young model weigh the fastest and read a cold pool 47 %
    optimistic (docs/benchmarks.md, "The prefill work left ahead"). Classes (and a pool) with
    fewer than ``PREFILL_RATE_MIN_ROWS`` such samples get no rate, and no class does while
    ``rows`` holds fewer than ``PREFILL_RATE_MIN_WINDOW``."""
    if int(np.count_nonzero(rows)) < PREFILL_RATE_MIN_WINDOW:
        return {}
    labels = np.asarray(ttft_ms, dtype=np.float64).reshape(-1)
    prompt = np.asarray(_get(cols, "input_token_length"), dtype=np.float64)
    uncached = prompt * (1.0 - np.clip(_get(cols, "prefix_cache_score"), 0.0, 1.0))
    with np.errstate(invalid="ignore"):
        alone = (
            np.asarray(rows, dtype=bool).reshape(-1)
            & np.isfinite(labels)
            & (labels > 0)
            & (np.asarray(_get(cols, "prefill_tokens_in_flight")) == 0)
            & (np.asarray(_get(cols, "num_request_waiting")) == 0)
            & (uncached >= PREFILL_RATE_MIN_TOKENS)
        )
    classes = cols.get("pod_class")
    names = np.asarray(
        [c or POOL_RATE for c in classes] if classes is not None else [POOL_RATE] * len(labels),
        dtype=object,
    )
    rates: dict[str, float] = {}
    groups = [(POOL_RATE, alone)] + [(c, alone & (names == c)) for c in set(names[alone]) - {""}]
    for name, member in groups:
        if int(member.sum()) >= PREFILL_RATE_MIN_ROWS:
            rates[name] = float(uncached[member].sum() / labels[member].sum())
    return rates


def prefill_rate_column(
    classes: Iterable[str | None] | None, rates: Mapping[str, float], n: int
) -> npt.NDArray[np.float64]:
    """Each row's prefill rate by its pod's class (``measure_prefill_rates``): the class's own,
    else the pool's, else 0 (no estimate: ``prefill_left`` is the whole count)."""
    pool = rates.get(POOL_RATE, 0.0)
    if classes is None or len(rates) <= 1:
        return np.full(n, pool, dtype=np.float64)
    return np.fromiter((rates.get(c or POOL_RATE, pool) for c in classes), np.float64, n)


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


def upstream_features(target: Target, cols: Columns) -> FeatureMatrix:
    """``(n, len(UPSTREAM_*_FEATURES))`` float32 matrix: upstream's columns for ``target``."""
    n = _rows(cols)
    prompt = _get(cols, "input_token_length")
    prefix = np.clip(_get(cols, "prefix_cache_score"), 0.0, 1.0)
    waiting = _get(cols, "num_request_waiting")
    values = {
        "is_queued": np.asarray(waiting, dtype=np.float64) > 0,
        "kv_cache_percentage": _get(cols, "kv_cache_percentage"),
        "input_token_length": prompt,
        "num_request_waiting": waiting,
        "num_request_running": _get(cols, "num_request_running"),
        "prefill_tokens_in_flight": _get(cols, "prefill_tokens_in_flight"),
        "decode_tokens_in_flight": _get(cols, "decode_tokens_in_flight"),
        "encoder_matched_size": _get(cols, "encoder_matched_size"),
        "encoder_input_size": _get(cols, "encoder_input_size"),
        "prefix_cache_score": prefix,
        "effective_input_tokens": (1.0 - prefix) * prompt,
        # Upstream: floor(prefix x 4), clipped to the buckets 0-3.
        "prefill_score_bucket": np.minimum(np.floor(prefix * 4.0), 3.0),
        "pod_type": _get(cols, "pod_type"),
        "num_tokens_generated": _get(cols, "num_tokens_generated"),
    }
    return _matrix(n, feature_names(target, "xgboost"), values)


def feature_names(target: Target, kind: Kind = "hybrid") -> tuple[str, ...]:
    if kind == "xgboost":
        return UPSTREAM_TTFT_FEATURES if target == "ttft" else UPSTREAM_TPOT_FEATURES
    return TTFT_FEATURES if target == "ttft" else TPOT_FEATURES


def base_feature_names(target: Target) -> tuple[str, ...]:
    return TTFT_BASE_FEATURES if target == "ttft" else TPOT_BASE_FEATURES


def feature_matrix(target: Target, cols: Columns, kind: Kind = "hybrid") -> FeatureMatrix:
    if kind == "xgboost":
        return upstream_features(target, cols)
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
