"""The pool replay cut into the advisor's parts: disjoint in time, the newest traffic, oldest
part first (the tuning part), each re-based; too little traffic refused."""

from __future__ import annotations

import numpy as np
import pytest

from backend.advisor.workloads import MIN_PART_REQUESTS, replay_parts
from backend.sim.traces import load_trace


def test_parts_are_consecutive_disjoint_and_the_newest_traffic() -> None:
    trace = load_trace("azure-code").head(250)
    parts = replay_parts(trace, 3, 60)
    assert [len(p) for p in parts] == [60, 60, 60]
    # The last 180 requests, in order: part i holds requests 70 + 60 i .. 70 + 60 i + 59.
    for i, part in enumerate(parts):
        lo = 70 + 60 * i
        assert np.array_equal(part.input_tokens, trace.input_tokens[lo : lo + 60])
        assert part.arrival_s[0] == 0.0
        gaps = np.diff(trace.arrival_s[lo : lo + 60])
        assert np.allclose(np.diff(part.arrival_s), gaps)
        assert part.units(0) == trace.units(lo)


def test_fewer_requests_shrink_the_parts_until_too_few() -> None:
    trace = load_trace("azure-code").head(100)
    assert [len(p) for p in replay_parts(trace, 3, 1000)] == [33, 33, 33]
    with pytest.raises(ValueError, match="at least 20 requests"):
        replay_parts(trace.head(3 * MIN_PART_REQUESTS - 1), 3, 1000)
