"""Block accounting of a pod's KV cache: capacity, reuse and LRU eviction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backend.sim.kvcache import KvCache, blocks


def test_blocks_round_up() -> None:
    assert [blocks(t) for t in (0, 1, 16, 17, 512)] == [0, 1, 1, 2, 32]


def test_released_units_stay_cached_and_evict_oldest_first() -> None:
    kv = KvCache(100)
    for h in (1, 2, 3):
        kv.allocate(32)
        assert kv.adopt(h, 32)
    assert kv.used == 96 and kv.free == 4
    for h in (1, 2, 3):
        kv.unref(h)
    assert kv.used == 0 and kv.evictable == 96
    assert kv.leading_run([1, 2, 3, 4]) == 3
    kv.ref(1)  # a reuse takes unit 1 out of the eviction queue
    kv.allocate(36)  # 32 more than free: evicts unit 2 (the oldest unreferenced) only
    assert kv.leading_run([2]) == 0 and kv.leading_run([1]) == 1 and kv.leading_run([3]) == 1
    kv.check()


def test_adopting_a_unit_already_cached_frees_the_duplicate() -> None:
    kv = KvCache(100)
    kv.allocate(32)
    kv.adopt(7, 32)
    kv.allocate(32)
    assert not kv.adopt(7, 32)
    assert kv.used == 32 and kv.refs(7) == 2
    kv.check()


def test_a_unit_computed_again_at_another_size_is_refused_loudly() -> None:
    kv = KvCache(100)
    kv.allocate(32)
    kv.adopt(7, 32)
    kv.allocate(20)
    with pytest.raises(ValueError, match="unit 7 is cached as 32 blocks and computed again as 20"):
        kv.adopt(7, 20)


def test_allocation_beyond_capacity_fails() -> None:
    kv = KvCache(10)
    kv.allocate(10)
    with pytest.raises(MemoryError):
        kv.allocate(1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 20)), max_size=60))
def test_accounting_invariants_hold(ops: list[tuple[int, int]]) -> None:
    kv = KvCache(200)
    held: list[int] = []
    private = 0
    for op, h in ops:
        if op == 0 and kv.available() >= 8:
            kv.allocate(8)
            private += 8
        elif op == 1 and private >= 8:
            private -= 8
            kv.adopt(h, 8)
            held.append(h)
        elif op == 2 and held:
            kv.unref(held.pop())
        elif op == 3 and kv.leading_run([h]) == 1:
            kv.ref(h)
            held.append(h)
        kv.check()
        assert kv.used + kv.evictable + kv.free == kv.capacity
        assert kv.used >= private
