"""The peers' hand-weighted prefix-and-load routers: llm-d, Dynamo, SGLang."""

from __future__ import annotations

from backend.sim.kvcache import BLOCK_TOKENS
from backend.sim.routers.base import Route, RoutingPolicy, pick_best
from backend.sim.routers.prefix_index import ApproxPrefixIndex, SglangTree
from backend.sim.server import Request
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import RouterView


class LoadPrefix(RoutingPolicy):
    """llm-d's scorer chain: ``queue-scorer``, ``kv-cache-utilization-scorer`` and
    ``prefix-cache-scorer`` (approximate index), weighted sum, ``max-score-picker``.

    queue = (q_max - q) / (q_max - q_min) over the candidates (1 for all when equal), from the
    scraped waiting-queue length; kv = 1 - scraped KV usage; prefix = the approximate index's
    ratio. Argmax with uniform random tie-break (the picker shuffles, then stable-sorts).
    """

    def __init__(self, queue: float, kv: float, prefix: float) -> None:
        super().__init__()
        self.weights = (queue, kv, prefix)
        label = f"{prefix:g}:{queue:g}:{kv:g}"
        self.name = f"llm-d-{int(prefix)}{int(queue)}{int(kv)}"  # the blog's naming
        self.reproduces = (
            f"llm-d load+prefix, queue {queue:g} / kv-cache {kv:g} / prefix {prefix:g} "
            f"(prefix:queue:kv = {label}); "
            + (
                "GIE ae8adbce chart and llm-d-inference-scheduler 520af478 code default"
                if (queue, kv, prefix) == (2.0, 2.0, 3.0)
                else "GIE chart before ae8adbce (no weights: 1 each)"
            )
            + "; approx-prefix-cache-producer with autoTune capacity; max-score picker"
        )
        self._index: ApproxPrefixIndex | None = None

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        caps = [s.profile.kv_capacity_tokens // UNIT_TOKENS for s in view.servers]
        self._index = ApproxPrefixIndex(len(view.servers), caps)

    def pick(self, req: Request, pods: list[int]) -> int:
        v, index = self.view, self._index
        assert index is not None
        wq, wkv, wp = self.weights
        gauges = [v.scraped(p) for p in pods]
        queues = [g.num_waiting for g in gauges]
        q_max, q_min = max(queues), min(queues)
        prefix = index.scores(req.units, pods)
        scores = []
        for g, q, pre in zip(gauges, queues, prefix, strict=True):
            queue = 1.0 if q_max == q_min else (q_max - q) / (q_max - q_min)
            scores.append(wq * queue + wkv * (1.0 - g.kv_cache_usage) + wp * pre)
        return pick_best(pods, scores, v.rng, lowest=False)

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        assert self._index is not None
        self._index.add(route.pod, req.units)
        if route.prefill is not None:
            self._index.add(route.prefill, req.units)


class DynamoKv(RoutingPolicy):
    """Dynamo's KV router, generation B (ai-dynamo/dynamo f08729ae, ``KvRouterConfig``
    defaults): ``logit = overlap_score_weight * prefill_blocks + decode_blocks``, weight 1,
    temperature 0 (argmin, uniform random ties).

    prefill_blocks = (uncached prompt tokens + active prefill tokens) / block size, where the
    overlap comes from KV events (the pod's real cache) and active prefill tokens are the router's
    uncached prompt tokens dispatched and not yet past their first token; decode_blocks = the
    request's blocks not already among the pod's active blocks + the pod's active blocks (unique
    blocks of its in-flight requests, shared blocks once), held until completion.
    """

    name = "dynamo-kv"
    reproduces = (
        "NVIDIA Dynamo KV router generation B (f08729ae, 2025-08): logit = 1.0 x prefill_blocks "
        "+ decode_blocks, KV-event overlap, router_temperature 0"
    )

    def __init__(self, overlap_weight: float = 1.0) -> None:
        super().__init__()
        self.overlap_weight = overlap_weight
        self._prefill_tokens: list[int] = []
        self._active: list[dict[int, int]] = []  # pod -> {block unit: in-flight requests}
        self._active_blocks: list[int] = []

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        n = len(view.servers)
        self._prefill_tokens = [0] * n
        self._active = [{} for _ in range(n)]
        self._active_blocks = [0] * n

    @staticmethod
    def _unit_blocks(req: Request, i: int) -> int:
        return -(-min(UNIT_TOKENS, req.prompt - i * UNIT_TOKENS) // BLOCK_TOKENS)

    def pick(self, req: Request, pods: list[int]) -> int:
        v = self.view
        logits = []
        for p in pods:
            run = v.servers[p].prefix_hit_units(req.units)
            uncached = req.prompt - min(run * UNIT_TOKENS, req.prompt)
            prefill_blocks = (uncached + self._prefill_tokens[p]) / BLOCK_TOKENS
            active = self._active[p]
            new_blocks = sum(
                self._unit_blocks(req, i) for i, h in enumerate(req.units) if h not in active
            )
            logits.append(
                self.overlap_weight * prefill_blocks + new_blocks + self._active_blocks[p]
            )
        return pick_best(pods, logits, v.rng, lowest=True)

    def _hold(self, pod: int, req: Request, sign: int) -> None:
        active = self._active[pod]
        for i, h in enumerate(req.units):
            count = active.get(h, 0)
            if sign > 0:
                if count == 0:
                    self._active_blocks[pod] += self._unit_blocks(req, i)
                active[h] = count + 1
            elif count == 1:
                del active[h]
                self._active_blocks[pod] -= self._unit_blocks(req, i)
            else:
                active[h] = count - 1

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        self._prefill_tokens[route.prefill if route.prefill is not None else route.pod] += (
            route.uncached
        )
        self._hold(route.pod, req, +1)

    def _prefill_done(self, route: Route) -> None:
        pod = route.prefill if route.prefill is not None else route.pod
        self._prefill_tokens[pod] -= route.uncached

    def on_first_token(self, req: Request, route: Route, now: float, ttft_ms: float) -> None:
        if route.prefill is None:
            self._prefill_done(route)

    def on_handoff(self, req: Request, route: Route, now: float, prefill_ms: float) -> None:
        self._prefill_done(route)

    def on_done(self, req: Request, route: Route, now: float, tpot_ms: float | None) -> None:
        self._hold(route.pod, req, -1)


class SglangCacheAware(RoutingPolicy):
    """sgl-router's ``cache_aware`` policy (sgl-project/sglang 026f853b), CLI defaults:
    cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, eviction every
    120 s to 2^26 characters per worker.

    Load is the router's in-flight request count. If the pool is imbalanced (max - min > 64 and
    max > 1.5 x min) the least loaded worker wins; otherwise the radix tree's match: a match rate
    above 0.3 goes to the deepest matched node's (first) worker, else to the worker with the
    smallest tree. The prompt is then inserted under the chosen worker.
    """

    name = "sglang-cache-aware"
    reproduces = (
        "sgl-router cache_aware (sglang 026f853b), CLI defaults 0.3 / 64 / 1.5, max_tree_size 2^26 "
        "chars, eviction every 120 s"
    )

    def __init__(
        self,
        cache_threshold: float = 0.3,
        balance_abs_threshold: int = 64,
        balance_rel_threshold: float = 1.5,
    ) -> None:
        super().__init__()
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs_threshold
        self.balance_rel = balance_rel_threshold
        self._tree: SglangTree | None = None

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self._tree = SglangTree(len(view.servers))

    def route(self, req: Request) -> Route:
        v = self.view
        if not v.disaggregated:
            return super().route(req)
        # Upstream's PD router with one policy: cache-aware for prefill, least load for decode.
        p = self.pick(req, v.prefill_pods)
        loads = [v.dispatched[d] for d in v.decode_pods]
        d = v.decode_pods[loads.index(min(loads))]
        return Route(d, prefill=p, uncached=self.uncached(req, p))

    def pick(self, req: Request, pods: list[int]) -> int:
        v, tree = self.view, self._tree
        assert tree is not None
        tree.maybe_evict(v.now)
        loads = [v.dispatched[p] for p in pods]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs and hi > self.balance_rel * lo:
            return pods[loads.index(lo)]
        matched, tenant = tree.match(req.units, v.now)
        rate = min(matched, req.prompt) / req.prompt
        if rate > self.cache_threshold and tenant is not None and tenant in pods:
            return tenant
        sizes = [tree.size_tokens[p] for p in pods]
        return pods[sizes.index(min(sizes))]

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        assert self._tree is not None
        # Under P/D only the prefill pod's tree learns the prompt (decode picks by load).
        pod = route.prefill if route.prefill is not None else route.pod
        self._tree.insert(pod, req.units, req.prompt, now)
