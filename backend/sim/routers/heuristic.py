"""The peers' prefix-and-load routers: llm-d (load+prefix weights and the sticky-until-saturated
default), LMetric, Dynamo, SGLang.

llm-d's two chains and LMetric decide with the scheduling library's cores
(``backend.scheduling.load_chains``, what ``/v1/schedule`` runs for a policy naming that chain);
the routers here feed them from the simulated router's counters and prefix index."""

from __future__ import annotations

from typing import Any, Final

from backend.scheduling.load_chains import (
    lmetric,
    lmetric_keys,
    load_prefix,
    sticky_until_saturated,
)
from backend.scheduling.types import SchedulingPolicy
from backend.sim.kvcache import BLOCK_TOKENS
from backend.sim.routers.base import Route, RoutingPolicy, pick_best
from backend.sim.routers.prefix_index import ApproxPrefixIndex, SglangTree
from backend.sim.server import Request
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import RouterView

UPSTREAM_PREFIX_CAP_TOKENS: Final = 256 * BLOCK_TOKENS
"""The GIE prefix plugin's defaults: ``DefaultMaxPrefixBlocks = 256`` blocks of
``DefaultBlockSizeTokens = 16`` (kubernetes-sigs/gateway-api-inference-extension, ``pkg/epp``
prefix plugin): only a prompt's first 4,096 tokens are hashed."""


def _approx_index(view: RouterView, max_tokens: int | None) -> ApproxPrefixIndex:
    caps = [s.profile.kv_capacity_tokens // UNIT_TOKENS for s in view.servers]
    return ApproxPrefixIndex(len(view.servers), caps, max_tokens=max_tokens)


class LoadPrefix(RoutingPolicy):
    """llm-d's scorer chain: ``queue-scorer``, ``kv-cache-utilization-scorer`` and
    ``prefix-cache-scorer`` (approximate index), weighted sum, ``max-score-picker``.

    queue = (q_max - q) / (q_max - q_min) over the candidates (1 for all when equal), from the
    scraped waiting-queue length; kv = 1 - scraped KV usage; prefix = the approximate index's
    ratio of matched 16-token blocks among the first ``max_prefix_tokens`` (upstream's default
    cap, 4,096). Argmax with uniform random tie-break (the picker shuffles, then stable-sorts).
    """

    def __init__(
        self,
        queue: float,
        kv: float,
        prefix: float,
        max_prefix_tokens: int | None = UPSTREAM_PREFIX_CAP_TOKENS,
    ) -> None:
        super().__init__()
        self.weights = (queue, kv, prefix)
        self.policy = SchedulingPolicy(
            chain="load-prefix",
            load_prefix_queue_weight=queue,
            load_prefix_kv_weight=kv,
            load_prefix_prefix_weight=prefix,
        )
        self.max_prefix_tokens = max_prefix_tokens
        label = f"{prefix:g}:{queue:g}:{kv:g}"
        self.name = f"llm-d-{int(prefix)}{int(queue)}{int(kv)}"  # the blog's naming
        cap = "uncapped" if max_prefix_tokens is None else f"first {max_prefix_tokens} tokens"
        self.reproduces = (
            f"llm-d load+prefix, queue {queue:g} / kv-cache {kv:g} / prefix {prefix:g} "
            f"(prefix:queue:kv = {label}); "
            + (
                "GIE ae8adbce chart and llm-d-inference-scheduler 520af478 code default"
                if (queue, kv, prefix) == (2.0, 2.0, 3.0)
                else "GIE chart before ae8adbce (no weights: 1 each)"
            )
            + f"; approximate prefix index in 16-token blocks, {cap} (GIE prefix plugin "
            "defaults), autoTune capacity; max-score picker"
        )
        self._index: ApproxPrefixIndex | None = None

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self._index = _approx_index(view, self.max_prefix_tokens)

    def pick(self, req: Request, pods: list[int]) -> int:
        v, index = self.view, self._index
        assert index is not None
        gauges = [v.scraped(p) for p in pods]
        choice = load_prefix(
            [g.num_waiting for g in gauges],
            [g.kv_cache_usage for g in gauges],
            index.scores(req.units, pods, req.prompt),
            self.policy,
            v.rng,
        )
        return pods[choice.index]

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        assert self._index is not None
        self._index.add(route.pod, req.units)
        if route.prefill is not None:
            self._index.add(route.prefill, req.units)


class StickyUntilSaturated(RoutingPolicy):
    """llm-d's current default: the optimized-baseline guide's "sticky until saturated" chain.

    Read from llm-d/llm-d ``guides/optimized-baseline/router/optimized-baseline.values.yaml``
    (0a3b0c93) and llm-d/llm-d-router ``pkg/epp/framework/plugins/scheduling/filter/
    prefixcacheaffinity`` (066c20ea), ``scorer/tokenload`` and
    ``requestcontrol/dataproducer/inflightload``:

    * ``approx-prefix-cache-producer``, ``maxPrefixTokensToMatch: 40960`` (the model's context);
    * ``prefix-cache-affinity-filter``, ``affinityThreshold: 0.80``: keep only the pods whose
      prefix score (matched blocks / blocks) reaches the threshold (all pods if none does),
      unless the best sticky pod carries more than ``maxTokensInFlightPenalty: 286720`` in-flight
      tokens above the best non-sticky one (the guide's token form of the filter's TTFT gate:
      18,000 ms x 15,928 tokens/s of its calibrated H100 pair); then keep all;
    * ``token-load-scorer`` (``queueThresholdTokens`` 4,194,304) and the injected
      ``max-score-picker``: fewest tokens = in-flight uncached prompt tokens (the in-flight load
      producer's counter: added at dispatch, discounted by the index's match, released at the
      first streamed token) plus this request's uncached tokens there; random among ties.

    Under P/D (the pd-disaggregation guide's composition) the prefill pod is chosen this way and
    the decode pod by ``active-request-scorer``: fewest requests in flight.
    """

    def __init__(
        self,
        affinity_threshold: float = 0.80,
        max_tokens_in_flight_penalty: int = 286_720,
        max_prefix_tokens: int = 40_960,
        queue_threshold_tokens: int = 4_194_304,
    ) -> None:
        super().__init__()
        self.name = "llm-d-default"
        self.affinity_threshold = affinity_threshold
        self.penalty = max_tokens_in_flight_penalty
        self.max_prefix_tokens = max_prefix_tokens
        self.queue_threshold = queue_threshold_tokens
        self.policy = SchedulingPolicy(
            chain="llm-d-default",
            sticky_affinity_threshold=affinity_threshold,
            max_tokens_in_flight_penalty=max_tokens_in_flight_penalty,
            queue_threshold_tokens=queue_threshold_tokens,
            max_prefix_tokens_to_match=max_prefix_tokens,
        )
        self.reproduces = (
            "llm-d optimized-baseline guide (llm-d/llm-d 0a3b0c93, llm-d-router 066c20ea): "
            f"prefix-cache-affinity-filter (threshold {affinity_threshold:g}, in-flight token "
            f"penalty {max_tokens_in_flight_penalty}) -> token-load-scorer -> max-score picker; "
            f"approximate prefix index over the first {max_prefix_tokens} tokens"
        )
        self._index: ApproxPrefixIndex | None = None
        self.broken = 0  # decisions where the load gate opened every pod
        self.sticky = 0  # decisions narrowed to sticky pods

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self._index = _approx_index(view, self.max_prefix_tokens)

    def route(self, req: Request) -> Route:
        v = self.view
        if not v.disaggregated:
            return super().route(req)
        p = self.pick(req, v.prefill_pods)
        d = pick_best(v.decode_pods, [v.dispatched[x] for x in v.decode_pods], v.rng, lowest=True)
        return Route(d, prefill=p, uncached=self.uncached(req, p))

    def uncached(self, req: Request, pod: int) -> int:
        # The in-flight counter is charged what the index believes, not what the pod holds.
        assert self._index is not None
        return self._index.uncached(req.units, [pod], req.prompt)[0]

    def pick(self, req: Request, pods: list[int]) -> int:
        v, index = self.view, self._index
        assert index is not None
        choice = sticky_until_saturated(
            index.scores(req.units, pods, req.prompt),
            [v.prefill_inflight[p] for p in pods],
            lambda kept: index.uncached(req.units, [pods[i] for i in kept], req.prompt),
            self.policy,
            v.rng,
        )
        if choice.outcome == "broken":
            self.broken += 1
        elif choice.outcome in ("sticky", "all_sticky"):
            self.sticky += 1
        return pods[choice.index]

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        assert self._index is not None
        self._index.add(route.prefill if route.prefill is not None else route.pod, req.units)

    def summary(self) -> dict[str, Any]:
        return {"sticky_decisions": self.sticky, "gate_broken_decisions": self.broken}


class LMetric(RoutingPolicy):
    """LMetric (Zhang et al., "Simple is Better: Multiplication May Be All You Need for LLM
    Request Scheduling", arXiv 2603.15202, 2026), from the paper's abstract: score = the
    KV-aware indicator ("new prefill tokens if routed to an instance") x the load indicator
    ("current batch size of the instance"), lowest wins; no hyper-parameters.

    New prefill tokens = this request's prompt tokens the pod's cache lacks (KV events, as the
    paper's deployment reads the engines' caches) plus, with ``pending``, the uncached tokens
    already dispatched there and not yet prefilled (the router's own counter: what the pod must
    prefill before this request). The abstract does not say where the batch size is read:
    ``batch="inflight"`` takes the router's own count of requests dispatched there and not
    finished (exact, immediate), ``"scraped"`` the pod's running-requests gauge (50 ms stale:
    a burst of tied arrivals all see the same idle pod, the product is 0 for each, and they
    herd). An idle pod scores 0; ties go to fewer new prefill tokens, then at random.
    """

    name = "lmetric"

    def __init__(self, pending: bool = True, batch: str = "inflight") -> None:
        super().__init__()
        if batch not in ("inflight", "scraped"):
            raise ValueError("batch must be 'inflight' or 'scraped'")
        self.pending = pending
        self.batch = batch
        self.reproduces = (
            "LMetric (arXiv 2603.15202, 2026): new prefill tokens x batch size, lowest wins; "
            + ("queued prefill tokens counted" if pending else "this request's tokens only")
            + ", KV-event prefix match, batch = "
            + ("the router's in-flight requests" if batch == "inflight" else "scraped running")
        )

    def pick(self, req: Request, pods: list[int]) -> int:
        v = self.view
        new = [self.uncached(req, p) + (v.prefill_inflight[p] if self.pending else 0) for p in pods]
        if self.batch == "inflight":
            batch = [v.dispatched[p] for p in pods]
        else:
            batch = [v.scraped(p).num_running for p in pods]
        return pods[lmetric(new, batch, v.rng).index]


__all__ = [
    "DynamoKv",
    "LMetric",
    "LoadPrefix",
    "SglangCacheAware",
    "StickyUntilSaturated",
    "lmetric_keys",
]


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
