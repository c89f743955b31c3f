"""A stored policy spec as the scheduling library's SchedulingPolicy (which knows no pydantic)."""

from __future__ import annotations

from backend.policies.schemas import SERVICE_FIELDS, PolicySpec
from backend.scheduling.types import SchedulingPolicy, TransferConfig

_TRANSFER_PREFIX = "transfer_"


def to_scheduling(spec: PolicySpec) -> SchedulingPolicy:
    data = spec.model_dump(exclude=set(SERVICE_FIELDS))
    transfer = {"kv_bytes_per_token": data.pop("kv_bytes_per_token")}
    for key in [k for k in data if k.startswith(_TRANSFER_PREFIX)]:
        transfer[key.removeprefix(_TRANSFER_PREFIX)] = data.pop(key)
    return SchedulingPolicy(**data, transfer=TransferConfig(**transfer))
