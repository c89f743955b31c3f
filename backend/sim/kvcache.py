"""One pod's KV cache: fixed-size blocks, and prefix blocks kept for reuse with LRU eviction.

Capacity is counted in vLLM's 16-token blocks. Prefix reuse is tracked per 512-token *unit* (a
trace block id), because that is the granularity of the traces' prefix hashes: a unit is a run
of ``ceil(tokens / 16)`` blocks that a later prompt with the same leading ids reuses as a whole.

Like vLLM's block pool: a unit referenced by a running request is in use; when its last
reference goes, it stays cached but becomes evictable and joins the tail of an LRU queue; an
allocation that finds too few free blocks evicts from the head. A request releases its units
deepest first, so a shared system prompt outlives the unique turns built on it.
"""

from __future__ import annotations

from collections import OrderedDict

BLOCK_TOKENS = 16


def blocks(tokens: int) -> int:
    return -(-tokens // BLOCK_TOKENS)


class KvCache:
    """Block accounting for one pod. ``used + evictable + free == capacity`` always."""

    __slots__ = ("_lru", "_refs", "capacity", "evictable", "free", "size")

    def __init__(self, capacity_blocks: int) -> None:
        self.capacity = capacity_blocks
        self.free = capacity_blocks  # neither referenced nor cached
        self.evictable = 0  # cached, unreferenced: reusable, or reclaimable on demand
        # Two flat dicts rather than one of lists, so that a clone is two shallow copies.
        self.size: dict[int, int] = {}  # cached unit id -> blocks
        self._refs: dict[int, int] = {}  # cached unit id -> running requests referencing it
        self._lru: OrderedDict[int, None] = OrderedDict()  # unreferenced units, oldest first

    @property
    def used(self) -> int:
        """Blocks referenced by running requests (vLLM's KV-cache usage gauge counts these)."""
        return self.capacity - self.free - self.evictable

    def available(self) -> int:
        return self.free + self.evictable

    def leading_run(self, ids: list[int]) -> int:
        """How many of ``ids``, from the first, are cached (referenced or not)."""
        size = self.size
        run = 0
        for h in ids:
            if h not in size:
                break
            run += 1
        return run

    def evictable_in(self, ids: list[int]) -> int:
        """Blocks of these cached units that are currently unreferenced (would stop being
        evictable once referenced)."""
        refs = self._refs
        return sum(self.size[h] for h in ids if refs[h] == 0)

    def ref(self, h: int) -> int:
        """Take a reference on cached unit ``h``; returns its size in blocks."""
        size, refs = self.size[h], self._refs[h]
        if refs == 0:
            del self._lru[h]
            self.evictable -= size
        self._refs[h] = refs + 1
        return size

    def adopt(self, h: int, size: int) -> bool:
        """Turn ``size`` freshly computed, already allocated blocks into cached unit ``h`` with
        one reference. If ``h`` is cached already (computed meanwhile by another request), take
        a reference on that one and free the duplicate instead. True if the blocks were adopted."""
        if h in self.size:
            if self.size[h] != size:
                # A unit id names one block's content, so one size. Two sizes was a replay that
                # shared a prompt's partial last block as another's whole one: the pod's
                # accounting then drifted and leaked references until a request "outgrew" the
                # cache (docs/capacity.md, "How far any scaler can go on Mooncake").
                raise ValueError(
                    f"unit {h} is cached as {self.size[h]} blocks and computed again as {size}: "
                    "a unit id must have one size"
                )
            self.ref(h)
            self.free += size
            return False
        self.size[h] = size
        self._refs[h] = 1
        return True

    def unref(self, h: int) -> None:
        refs = self._refs[h] - 1
        self._refs[h] = refs
        if refs == 0:
            self._lru[h] = None
            self.evictable += self.size[h]

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks, evicting the least recently released units as needed."""
        if n > self.free + self.evictable:
            raise MemoryError(f"{n} blocks requested, {self.free + self.evictable} available")
        while self.free < n:
            h, _ = self._lru.popitem(last=False)
            del self._refs[h]
            size = self.size.pop(h)
            self.evictable -= size
            self.free += size
        self.free -= n

    def release(self, n: int) -> None:
        self.free += n

    def refs(self, h: int) -> int:
        return self._refs[h]

    def referenced_blocks(self) -> int:
        return sum(self.size[h] for h, r in self._refs.items() if r > 0)

    def check(self) -> None:
        """Assert the accounting invariants (tests)."""
        assert 0 <= self.free <= self.capacity
        assert self.evictable == sum(self.size[h] for h in self._lru)
        assert all(self._refs[h] == 0 for h in self._lru)
        assert all(r >= 0 for r in self._refs.values())
        assert self.used >= 0

    def clone(self) -> KvCache:
        other = KvCache(self.capacity)
        other.free, other.evictable = self.free, self.evictable
        other.size = self.size.copy()
        other._refs = self._refs.copy()
        other._lru = self._lru.copy()
        return other
