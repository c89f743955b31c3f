"""The shipped traces: present with their notices, loaded faithfully, rescaled and clipped."""

from __future__ import annotations

import numpy as np
import pytest

from backend.sim.traces import TRACE_NAMES, TenantModel, load_trace, tenant_prefixes
from backend.sim.traces.loader import traces_dir


def test_trace_files_ship_with_licences_and_notice() -> None:
    root = traces_dir()
    assert (root / "NOTICE.md").is_file()
    assert (root / "mooncake" / "LICENSE-APACHE").is_file()
    assert (root / "azure" / "LICENSE").is_file()
    notice = (root / "NOTICE.md").read_text(encoding="utf-8")
    for commit in (
        "3b5a594133958449a1feaf1c9e0fc1b553e34a28",
        "b469a113cedca53ddc3bdea71a143dc4b7d8700c",
    ):
        assert commit in notice


@pytest.mark.parametrize("name", TRACE_NAMES)
def test_traces_load_consistently(name: str) -> None:
    trace = load_trace(name)
    assert len(trace) > 3000
    assert trace.arrival_s[0] == 0.0 and (np.diff(trace.arrival_s) >= 0).all()
    assert (trace.input_tokens >= 1).all() and (trace.output_tokens >= 1).all()
    blocks = np.diff(trace.hash_offsets)
    np.testing.assert_array_equal(blocks, -(-trace.input_tokens // 512))


def test_mooncake_conversation_matches_its_published_shape() -> None:
    stats = load_trace("mooncake-conversation").stats()
    assert stats["requests"] == 12031
    assert stats["input_mean"] == pytest.approx(12035, abs=1)
    assert stats["unbounded_cache_hit_share"] == pytest.approx(0.37, abs=0.01)


def test_scaling_and_clipping() -> None:
    trace = load_trace("mooncake-conversation").head(500)
    fast = trace.scaled(2.0)
    assert fast.duration_s == pytest.approx(trace.duration_s / 2)
    clipped = trace.clipped(8192)
    assert (clipped.input_tokens + clipped.output_tokens <= 8192).all()
    np.testing.assert_array_equal(np.diff(clipped.hash_offsets), -(-clipped.input_tokens // 512))
    # Clipping keeps each prompt's leading blocks.
    assert clipped.units(0) == trace.units(0)[: len(clipped.units(0))]
    window = trace.window(10.0, 20.0)
    assert window.arrival_s[0] == 0.0 and window.duration_s < 10.0


def test_tenant_prefixes_share_system_prompts_and_are_reproducible() -> None:
    tokens = np.asarray([100, 600, 3000, 3000, 5000] * 40, dtype=np.int64)
    model = TenantModel(tenants=4, max_units=3, seed=1)
    ids, offsets = tenant_prefixes(tokens, model)
    again, _ = tenant_prefixes(tokens, model)
    np.testing.assert_array_equal(ids, again)
    np.testing.assert_array_equal(np.diff(offsets), -(-tokens // 512))
    first = [int(ids[offsets[i]]) for i in range(len(tokens)) if tokens[i] >= 512]
    assert len(set(first)) <= 4  # every long-enough prompt starts with its tenant's block
    azure = load_trace("azure-conv")
    assert azure.stats()["unbounded_cache_hit_share"] > 0.2
