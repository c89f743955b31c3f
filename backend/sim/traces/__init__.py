"""Shipped request traces (data in the subfolders, see NOTICE.md) and their loader."""

from backend.sim.traces.loader import (
    TRACE_NAMES,
    UNIT_TOKENS,
    TenantModel,
    Trace,
    load_trace,
    tenant_prefixes,
)

__all__ = ["TRACE_NAMES", "UNIT_TOKENS", "TenantModel", "Trace", "load_trace", "tenant_prefixes"]
