"""The policy form: built from `PolicySpec` itself, validated by it, errors kept per field.

The form's inputs, their kinds and their limits come from the schema, so a field added to
`PolicySpec` appears on the page (in "Other settings") without touching the console.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from backend.policies.schemas import ObjectiveCreate, ObjectiveUpdate, PolicySpec

Kind = Literal["number", "optional_number", "integer", "choice", "flag", "weight"]

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Chain", ("chain",)),
    (
        "SLOs",
        (
            "mode",
            "default_ttft_slo_ms",
            "default_tpot_slo_ms",
            "slo_buffer_factor",
            "target_slo_attainment",
            "desired_plateau",
            "tpot_tier_quantile",
        ),
    ),
    ("Pods", ("gpu_profile",)),
    (
        "Scoring",
        ("strategy", "ttft_weight", "picker", "scorer", "epsilon_explore_neg", "streaming_mode"),
    ),
    (
        "Prefix affinity",
        (
            "strict_affinity_threshold",
            "loose_affinity_threshold",
            "affinity_exploration_probability",
            "max_ttft_penalty_ms",
        ),
    ),
    (
        "Heuristic fallback (no model yet)",
        ("fallback_kv_weight", "fallback_queue_weight", "fallback_prefix_weight"),
    ),
    (
        "Prefill/decode disaggregation",
        (
            "pd_selection",
            "expected_output_tokens",
            "kv_bytes_per_token",
            "transfer_same_host_gbps",
            "transfer_same_rack_gbps",
            "transfer_same_zone_gbps",
            "transfer_same_region_gbps",
            "transfer_cross_region_gbps",
        ),
    ),
    (
        "llm-d default chain (sticky until saturated)",
        (
            "sticky_affinity_threshold",
            "max_tokens_in_flight_penalty",
            "queue_threshold_tokens",
            "max_prefix_tokens_to_match",
        ),
    ),
    (
        "Load+prefix chain",
        ("load_prefix_queue_weight", "load_prefix_kv_weight", "load_prefix_prefix_weight"),
    ),
    ("LMetric chain (Headroom-only: /v1/schedule)", ("lmetric_pending", "lmetric_batch")),
)

LABELS = {
    "chain": "Plugin chain",
    "sticky_affinity_threshold": "Affinity threshold (prefix score)",
    "max_tokens_in_flight_penalty": "Max in-flight tokens penalty",
    "queue_threshold_tokens": "Token-load queue threshold (tokens)",
    "max_prefix_tokens_to_match": "Max prefix tokens to match",
    "load_prefix_queue_weight": "Queue scorer weight",
    "load_prefix_kv_weight": "KV-cache scorer weight",
    "load_prefix_prefix_weight": "Prefix-cache scorer weight",
    "lmetric_pending": "Count pending prefill tokens",
    "lmetric_batch": "Batch size from",
    "default_ttft_slo_ms": "Default TTFT SLO (ms)",
    "default_tpot_slo_ms": "Default TPOT SLO (ms)",
    "ttft_weight": "TTFT / TPOT weighting",
    "epsilon_explore_neg": "Exploration into the negative tier",
    "max_ttft_penalty_ms": "Max TTFT penalty for affinity (ms)",
    "slo_buffer_factor": "TPOT SLO buffer factor",
    "target_slo_attainment": "Target SLO attainment (desired replicas)",
    "desired_plateau": "Plateau: how far below the most pods' attainment (desired replicas)",
    "tpot_tier_quantile": "TPOT the SLO tier compares",
    "gpu_profile": "GPU profile of the pods (replays)",
    "pd_selection": "P/D selection",
    "kv_bytes_per_token": "KV bytes per token",
    "fallback_kv_weight": "Weight of free KV",
    "fallback_queue_weight": "Weight of a short queue",
    "fallback_prefix_weight": "Weight of prefix hits",
    "transfer_same_host_gbps": "KV transfer, same host (Gbit/s)",
    "transfer_same_rack_gbps": "KV transfer, same rack (Gbit/s)",
    "transfer_same_zone_gbps": "KV transfer, same zone (Gbit/s)",
    "transfer_same_region_gbps": "KV transfer, same region (Gbit/s)",
    "transfer_cross_region_gbps": "KV transfer, cross region (Gbit/s)",
}


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    description: str
    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    limits: str = ""


def _limits(info: FieldInfo) -> tuple[float | None, float | None, str]:
    low = high = None
    words = []
    for meta in info.metadata:
        for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(meta, key, None)
            if value is not None:
                words.append(f"{sign} {value:,}" if isinstance(value, int) else f"{sign} {value:g}")
                if key in ("ge", "gt"):
                    low = float(value)
                else:
                    high = float(value)
    return low, high, ", ".join(words)


def _kind(name: str, annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    if name == "ttft_weight":
        return "weight", ()
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return "choice", tuple(str(a) for a in args)
    if annotation is bool:
        return "flag", ()
    if annotation is int:
        return "integer", ()
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        return "optional_number", ()
    return "number", ()


def _field(name: str, info: FieldInfo) -> FormField:
    kind, choices = _kind(name, info.annotation)
    low, high, limits = _limits(info)
    return FormField(
        name=name,
        label=LABELS.get(name, name.replace("_", " ").capitalize()),
        # The schema's descriptions are written for OpenAPI (Markdown); plain text here.
        description=(info.description or "").replace("`", ""),
        kind=kind,
        choices=choices,
        minimum=low,
        maximum=high,
        limits=limits,
    )


def policy_groups() -> list[tuple[str, list[FormField]]]:
    fields = PolicySpec.model_fields
    grouped = {name for _, names in GROUPS for name in names}
    groups = [
        (title, [_field(n, fields[n]) for n in names if n in fields]) for title, names in GROUPS
    ]
    others = [_field(n, info) for n, info in fields.items() if n not in grouped]
    if others:
        groups.append(("Other settings", others))
    return groups


FIELDS = {f.name: f for _, group in policy_groups() for f in group}


def form_values(spec: PolicySpec) -> dict[str, str]:
    """A spec as the strings its inputs show."""
    out = {}
    for name, value in spec.model_dump(mode="json").items():
        if value is None:
            out[name] = ""
        elif isinstance(value, bool):
            out[name] = "on" if value else ""
        else:
            out[name] = _number(value) if isinstance(value, float) else str(value)
    return out


def _number(value: float) -> str:
    # repr keeps every digit ("%g" would turn 1234567.0 into 1.23457e+06 and lose some).
    return str(int(value)) if value.is_integer() else repr(value)


def _message(error: Mapping[str, Any]) -> str:
    message = str(error.get("msg", "invalid value"))
    return message.removeprefix("Value error, ")


@dataclass(frozen=True)
class ParsedPolicy:
    values: dict[str, str]
    """What was submitted, to show again next to the errors."""
    spec: PolicySpec | None
    errors: dict[str, str]


def parse_policy_form(form: Mapping[str, Any]) -> ParsedPolicy:
    """Validate a submitted policy form with the schema; each error is kept under its field."""
    values: dict[str, str] = {}
    data: dict[str, Any] = {}
    for name, field in FIELDS.items():
        raw = form.get(name)
        text = raw.strip() if isinstance(raw, str) else ""
        if field.kind == "flag":
            # An unticked checkbox sends nothing.
            values[name] = "on" if text else ""
            data[name] = bool(text)
            continue
        values[name] = text
        if field.kind == "optional_number" and text == "":
            data[name] = None
        elif text == "":
            continue  # reported as missing below
        else:
            data[name] = text
    errors: dict[str, str] = {}
    for name, field in FIELDS.items():
        if name not in data and field.kind != "optional_number":
            errors[name] = "A value is required."
    try:
        spec = PolicySpec.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            loc = error.get("loc", ())
            key = str(loc[0]) if loc else "form"
            errors.setdefault(key, _message(error))
        return ParsedPolicy(values, None, errors)
    if errors:
        return ParsedPolicy(values, None, errors)
    return ParsedPolicy(values, spec, {})


def parse_objective_create(
    pool: str, form: Mapping[str, Any]
) -> tuple[ObjectiveCreate | None, dict[str, str]]:
    data = {
        "pool": pool,
        "name": str(form.get("name", "")).strip(),
        "priority": str(form.get("priority", "")).strip() or "0",
        "description": str(form.get("description", "")).strip(),
    }
    try:
        return ObjectiveCreate.model_validate(data), {}
    except ValidationError as exc:
        return None, _errors(exc)


def parse_objective_update(
    form: Mapping[str, Any],
) -> tuple[ObjectiveUpdate | None, dict[str, str]]:
    data = {
        "priority": str(form.get("priority", "")).strip() or None,
        "description": str(form.get("description", "")).strip(),
        "base_version": base_version_of(form),
    }
    try:
        return ObjectiveUpdate.model_validate(data), {}
    except ValidationError as exc:
        return None, _errors(exc)


def _errors(exc: ValidationError) -> dict[str, str]:
    out: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        loc = error.get("loc", ())
        out.setdefault(str(loc[0]) if loc else "form", _message(error))
    return out


# Versions and other counters in forms: bounded like the integer columns they are compared with.
_MAX_FORM_INT = 2**31 - 1


def form_int(form: Mapping[str, Any], name: str) -> int | None:
    """A positive integer field, or None when it is absent or not one (never an overflow)."""
    raw = form.get(name)
    text = raw.strip() if isinstance(raw, str) else ""
    if not text.isdigit() or not text.isascii() or len(text) > 10:
        return None
    value = int(text)
    return value if 1 <= value <= _MAX_FORM_INT else None


def base_version_of(form: Mapping[str, Any]) -> int | None:
    """The version the form was opened at (a hidden field): a save is refused if the policy
    has moved on since. Absent (or 0, a pool without a policy yet) means "no check"."""
    return form_int(form, "base_version")
