"""Router-side prefix indexes: what a router *believes* each pod has cached.

Neither asks the pods. Both assume "routed means cached" and forget only by their own rule, so
they drift from the pods' real caches (which evict under KV pressure); the simulator's pods keep
the truth, which the KV-event-driven routers (Dynamo, "precise" scoring) read directly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from backend.sim.kvcache import BLOCK_TOKENS
from backend.sim.traces.loader import UNIT_TOKENS


def block_share(units_held: int, tokens: int, block_tokens: int = BLOCK_TOKENS) -> float:
    """The prefix score upstream computes: matched ``block_tokens``-token blocks over the
    ``tokens``' blocks, where the leading ``units_held`` 512-token trace units are cached.

    The traces hash 512-token units, upstream hashes 16-token blocks (KV events carry vLLM's
    blocks; the GIE prefix plugin hashes the same size), so a prompt's last, partial unit counts
    as the tokens it holds, not as a whole unit: a 700-token prompt with its first unit cached
    scores 32 / 44, not 1 / 2."""
    blocks = -(-tokens // block_tokens) or 1
    per_unit = UNIT_TOKENS // block_tokens
    return min(units_held * per_unit, blocks) / blocks


class ApproxPrefixIndex:
    """llm-d's ``approx-prefix-cache-producer`` (llm-d-inference-scheduler 520af478).

    Per pod an LRU of block hashes routed to it, plus a global hash -> pods map. A request's
    blocks are added to the chosen pod(s) at dispatch (PreRequest). Matching walks the request's
    blocks from the first and stops at the first block no pod holds; a pod's score is the number
    of walked blocks it holds over the request's block count. Capacity per pod, with ``autoTune``,
    is the engine's KV capacity, here in 512-token blocks (the traces' hash granularity).

    ``max_tokens`` is upstream's cap on what is hashed at all: the GIE prefix plugin's defaults
    (kubernetes-sigs/gateway-api-inference-extension, ``pkg/epp/.../prefix``:
    ``DefaultBlockSizeTokens = 16``, ``DefaultMaxPrefixBlocks = 256``) stop at the first 4,096
    tokens; the optimized-baseline guide sets ``maxPrefixTokensToMatch`` to the model's context.
    Given the prompt, scores count 16-token blocks (``block_share``): a pod holding the
    request's first k hash units matches ``min(k * 32, total)`` of the ``total = ceil(min(prompt,
    cap) / 16)`` blocks, so with a cap two prompts that agree on their first 4,096 tokens look
    identical, as they do upstream.
    """

    def __init__(
        self,
        pods: int,
        capacity_units: list[int],
        *,
        max_tokens: int | None = None,
        block_tokens: int = BLOCK_TOKENS,
    ) -> None:
        self._lru: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(pods)]
        self._holders: dict[int, set[int]] = {}
        self._capacity = capacity_units
        self.max_tokens = max_tokens
        self._block = block_tokens
        self._cap_units = None if max_tokens is None else -(-max_tokens // UNIT_TOKENS)

    def _walk(self, units: list[int]) -> dict[int, int]:
        """Per pod, the leading hash units it holds, up to the first unit no pod holds."""
        counts: dict[int, int] = {}
        for h in units if self._cap_units is None else units[: self._cap_units]:
            holders = self._holders.get(h)
            if not holders:
                break
            for p in holders:
                counts[p] = counts.get(p, 0) + 1
        return counts

    def scores(self, units: list[int], pods: list[int], prompt: int) -> list[float]:
        counts = self._walk(units)
        hashed = prompt if self.max_tokens is None else min(prompt, self.max_tokens)
        return [block_share(counts.get(p, 0), hashed, self._block) for p in pods]

    def uncached(self, units: list[int], pods: list[int], prompt: int) -> list[int]:
        """Prompt tokens each pod would compute as the index believes (llm-d's in-flight load
        producer: unmatched indexed blocks plus the tail past the cap)."""
        counts = self._walk(units)
        hashed = prompt if self.max_tokens is None else min(prompt, self.max_tokens)
        return [prompt - min(counts.get(p, 0) * UNIT_TOKENS, hashed) for p in pods]

    def add(self, pod: int, units: list[int]) -> None:
        lru = self._lru[pod]
        for h in units if self._cap_units is None else units[: self._cap_units]:
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            self._holders.setdefault(h, set()).add(pod)
        while len(lru) > self._capacity[pod]:
            old, _ = lru.popitem(last=False)
            holders = self._holders[old]
            holders.discard(pod)
            if not holders:
                del self._holders[old]


SGLANG_CHARS_PER_TOKEN: Final = 4


class SglangTree:
    """sgl-router's multi-tenant radix tree (``tree.rs``), at block rather than character level.

    A node per block id (ids chain, so a node stands for the whole prefix up to it); each node
    keeps its tenants (workers) in insertion order with a last-access time. ``match`` returns
    the matched prefix length in tokens and the *first* tenant of the deepest matched node (the
    first key of that node's tenant map). Eviction runs every ``eviction_interval_s``: each
    tenant over ``max_tree_size`` characters (counted as 4 characters a token) loses its least
    recently used nodes; access times are refreshed along every matched and inserted path, so
    parents outlive their children as with upstream's leaf-first eviction.
    """

    def __init__(
        self, pods: int, *, max_tree_size: int = 2**26, eviction_interval_s: float = 120.0
    ) -> None:
        self._nodes: dict[int, dict[int, float]] = {}  # block -> {tenant: last access}
        self._owned: list[dict[int, int]] = [{} for _ in range(pods)]  # tenant -> {block: tokens}
        self.size_tokens = [0] * pods
        self._limit_tokens = max_tree_size // SGLANG_CHARS_PER_TOKEN
        self._interval = eviction_interval_s
        self._next_eviction = eviction_interval_s

    def match(self, units: list[int], now: float) -> tuple[int, int | None]:
        depth, tenant = 0, None
        for h in units:
            node = self._nodes.get(h)
            if not node:
                break
            depth += 1
            tenant = next(iter(node))
            for t in node:
                node[t] = now
        return depth * UNIT_TOKENS, tenant

    def insert(self, pod: int, units: list[int], prompt: int, now: float) -> None:
        owned = self._owned[pod]
        for i, h in enumerate(units):
            node = self._nodes.setdefault(h, {})
            node[pod] = now
            if h not in owned:
                tokens = min(UNIT_TOKENS, prompt - i * UNIT_TOKENS)
                owned[h] = tokens
                self.size_tokens[pod] += tokens

    def maybe_evict(self, now: float) -> None:
        if now < self._next_eviction:
            return
        self._next_eviction = now + self._interval
        for pod, owned in enumerate(self._owned):
            excess = self.size_tokens[pod] - self._limit_tokens
            if excess <= 0:
                continue
            by_age = sorted(owned, key=lambda h: self._nodes[h][pod])
            for h in by_age:
                if excess <= 0:
                    break
                tokens = owned.pop(h)
                excess -= tokens
                self.size_tokens[pod] -= tokens
                node = self._nodes[h]
                del node[pod]
                if not node:
                    del self._nodes[h]
