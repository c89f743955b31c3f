"""Wire shapes of samples. Field names are the upstream llm-d latency-predictor's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from backend.predictor.features import POD_ROLE_CODES, POD_TYPE_CODES

MAX_BULK_ROWS = 10_000
INT32_MAX = 2**31 - 1
# A latency above a day is a unit mistake, not a measurement.
MAX_LATENCY_MS = 86_400_000.0

# Control characters (C0, DEL, C1) in a name end up in logs, HTML, exports and, for NUL,
# PostgreSQL refuses the string outright: no string field of any body accepts them.
NO_CONTROL_CHARS = r"^[^\x00-\x1f\x7f-\x9f]*$"
SafeText = Annotated[str, StringConstraints(pattern=NO_CONTROL_CHARS)]
NameText = Annotated[str, StringConstraints(max_length=253, pattern=NO_CONTROL_CHARS)]
"""A pod or host name: at most a Kubernetes object name's length, no control characters."""

POD_TYPE_NAMES: tuple[str, ...] = tuple(POD_TYPE_CODES)
KNOWN_POD_ROLES: tuple[str, ...] = tuple(POD_ROLE_CODES)
MAX_ROLE_LENGTH = 63  # a Kubernetes label value

# Sample times further from the server's clock are a broken clock or a forged row; accepted,
# they would sort before or after every honest row and, at the edges of the calendar,
# overflow the date arithmetic of the pages that read them back.
MAX_SAMPLE_AGE = timedelta(days=366)
MAX_CLOCK_AHEAD = timedelta(days=1)


def _count(default: int | None = None, description: str = "") -> Any:
    """A non-negative int32 field; required when no default is given."""
    if default is None:
        return Field(ge=0, le=INT32_MAX, description=description)
    return Field(default, ge=0, le=INT32_MAX, description=description)


class Features(BaseModel):
    """The state of one candidate pod plus the request, as the EPP sees it at scheduling time."""

    # Unknown fields are ignored (upstream does the same, and the EPP adds fields over time);
    # NaN and infinity are refused: one of them poisons a whole training window.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    kv_cache_percentage: float = Field(ge=0, le=1, description="KV-cache utilisation, 0..1.")
    input_token_length: int = _count(description="Prompt tokens.")
    num_request_waiting: int = _count(description="Requests queued on the pod.")
    num_request_running: int = _count(description="Requests running on the pod.")
    num_tokens_generated: int = _count(description="Tokens generated so far.")
    prefix_cache_score: float = Field(
        ge=0, le=1, description="Share of the prompt already in the pod's prefix cache."
    )
    pod_type: str | None = Field(
        "",
        max_length=MAX_ROLE_LENGTH,
        pattern=NO_CONTROL_CHARS,
        description='The pod\'s llm-d.ai/role label value, stored as sent: "", prefill, '
        "decode, prefill-decode and both (both phases), encode, encode-prefill, "
        "encode-prefill-decode; another value is read as both phases and reported in "
        "/v1/samples/stats.",
    )
    prefill_tokens_in_flight: int = _count(
        0, "Uncached prompt tokens dispatched, not yet prefilled."
    )
    decode_tokens_in_flight: int = _count(0, "Decode tokens in flight on the pod.")
    encoder_input_size: int = _count(0, "Multimodal encoder input size.")
    encoder_matched_size: int = _count(0, "Part of the encoder input already cached.")
    ms_since_last_token: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_MS,
        description="Ours, optional: milliseconds since the pod last streamed a token to any "
        "request (or became busy, if it has streamed none since); 0 with nothing in flight. "
        "A router proxying the pod's streams knows it; the TTFT model reads it.",
    )
    oldest_prefill_wait_ms: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_MS,
        description="Ours, optional: milliseconds since the oldest request dispatched to the "
        "pod and still without its first token was dispatched; 0 when there is none.",
    )
    ms_since_last_first_token: float = Field(
        0.0,
        ge=0,
        le=MAX_LATENCY_MS,
        description="Ours, optional: milliseconds since the pod last streamed a request's first "
        "token (a prefill finished); 0 when it never has or nothing is in flight. With the "
        "oldest wait it dates the prefills the pod holds now; the TTFT model reads it.",
    )
    pod_class: str | None = Field(
        None,
        max_length=63,
        pattern=NO_CONTROL_CHARS,
        description="Ours: GPU type / runtime of the pod, for mixed pools.",
    )

    @field_validator("encoder_matched_size")
    @classmethod
    def _matched_within_input(cls, value: int, info: ValidationInfo) -> int:
        size = info.data.get("encoder_input_size")
        if size is not None and value > size:
            raise ValueError("must not exceed encoder_input_size")
        return value


class TrainingEntry(Features):
    """One observed latency.

    A TTFT sample has actual_tpot_ms = 0, a TPOT sample actual_ttft_ms = 0.
    """

    actual_ttft_ms: float = Field(ge=0, le=MAX_LATENCY_MS)
    actual_tpot_ms: float = Field(ge=0, le=MAX_LATENCY_MS)
    timestamp: datetime | None = Field(None, description="When it was observed; default: now.")
    predicted_ttft_ms: float | None = Field(
        None, ge=0, le=MAX_LATENCY_MS, description="The prediction the router used, if any."
    )
    predicted_tpot_ms: float | None = Field(None, ge=0, le=MAX_LATENCY_MS)
    pod: NameText | None = Field(None, description="Name of the pod that served it.")
    prefix_group: NameText | None = Field(
        None,
        description="Ours, optional: a session or shared-system-prompt id. Requests of one group "
        "share their prompt's leading tokens; the pool's replay (desired replicas) uses it.",
    )

    @field_validator("timestamp")
    @classmethod
    def _aware_and_recent(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        # The EPP sends UTC; a naive time is read as UTC rather than as server-local time.
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        now = datetime.now(UTC)
        # Compared, never converted: converting 9999-12-31T23:00-05:00 to UTC overflows.
        if not now - MAX_SAMPLE_AGE <= value <= now + MAX_CLOCK_AHEAD:
            raise ValueError(
                f"must be within {MAX_SAMPLE_AGE.days} days before and "
                f"{MAX_CLOCK_AHEAD.days} day after the server's clock ({now:%Y-%m-%dT%H:%M}Z)"
            )
        return value


class SamplesBulk(BaseModel):
    model_config = ConfigDict(extra="ignore")

    entries: list[TrainingEntry] = Field(min_length=1, max_length=MAX_BULK_ROWS)


class UpstreamTrainingBulk(BaseModel):
    """`POST /add_training_data_bulk` body; upstream accepts an empty list, so do we."""

    model_config = ConfigDict(extra="ignore")

    entries: list[TrainingEntry] = Field(max_length=MAX_BULK_ROWS)


class IngestResult(BaseModel):
    pool: str
    accepted: int = Field(description="Entries accepted.")
    ttft_samples: int = Field(description="Rows added to the TTFT window.")
    tpot_samples: int = Field(description="Rows added to the TPOT window.")
    unlabelled: int = Field(description="Entries with neither latency > 0; they feed no window.")


class BucketCount(BaseModel):
    bucket: int
    kv_range: tuple[float, float]
    prefix_range: tuple[float, float]
    queue_range: tuple[int, int | None]
    train: int
    test: int


class TargetStats(BaseModel):
    train: int
    test: int
    buckets: list[BucketCount]
    outliers: int = Field(
        0,
        description="At the last training: window rows whose latency is more than "
        "training.outlier_factor away from the active model's prediction. Kept, but they train "
        "only once their shift has held (docs/design.md, the flood rule).",
    )
    shift_since: datetime | None = Field(
        None, description="Since when most new rows have been outliers (none: no shift)."
    )


class RoleCount(BaseModel):
    pod_type: str = Field(description='The value as the EPP sent it ("" for none).')
    samples: int
    known: bool = Field(
        description="False: a role Headroom does not know, read as a pod serving both phases."
    )


class WindowStats(BaseModel):
    pool: str
    cap: int = Field(description="Most samples a bucket keeps (trimmed in the background).")
    targets: dict[str, TargetStats]
    pod_types: list[RoleCount] = Field(
        default_factory=list, description="Rows stored per pod_type value, most first."
    )
    unknown_pod_types: list[str] = Field(
        default_factory=list, description="Values of pod_type that no known role matches."
    )


class UpstreamFlushRequest(BaseModel):
    """Upstream's `POST /flush` body; every field is optional."""

    model_config = ConfigDict(extra="ignore")

    flush_training_data: bool = True
    flush_test_data: bool = True
    flush_metrics: bool = True
    reason: str | None = Field(None, max_length=500)


class UpstreamFlushResponse(BaseModel):
    success: bool
    flushed_at: str
    reason: str | None
    ttft_training_samples_flushed: int
    tpot_training_samples_flushed: int
    ttft_test_samples_flushed: int
    tpot_test_samples_flushed: int
    metrics_cleared: bool
    message: str


class WindowFlushRequest(BaseModel):
    """`POST /v1/samples/flush`: empty a pool's window, with the reason recorded."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=500, description="Why (kept in the audit trail).")
    older_than: datetime | None = Field(
        None, description="Only remove rows observed before this time (default: all of them)."
    )

    @field_validator("older_than")
    @classmethod
    def _aware_older_than(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("older_than needs a time zone (e.g. 2026-12-01T10:00:00Z)")
        return value


class WindowFlushRead(BaseModel):
    id: int
    pool: str
    flushed_at: datetime
    flushed_by: str
    reason: str
    older_than: datetime | None
    ttft_removed: int
    tpot_removed: int
