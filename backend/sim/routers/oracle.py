"""A myopic look-ahead reference: route on true latencies, found by running copies of the pods
forward. Not a ceiling: it prices each request alone against the present, so a policy that
plans for later arrivals can beat it (Headroom does under P/D).

For each candidate the oracle runs a copy of the pod, with the request added, on the true cost
model until the request's first token and 16 decode tokens (``Server.lookahead``): exact
knowledge of the present, none of the future (later arrivals are not simulated). It knows the
true output length. Among the pods where the request meets both SLOs it takes the lowest
end-to-end latency; if none, the lowest end-to-end latency. Under P/D it prices every pair:
time to handoff on P, the true KV transfer (the fabric's constants, what D lacks), then D's
first token and TPOT, with the requests already routed to D but still prefilling queued ahead
(without them every look-ahead sees the same empty decode pod and the oracle herds).

To stay affordable under overload (queues minutes deep) the pods are tried least loaded first
and a look-ahead stops once it is ``BOUND_FACTOR`` times slower to the first token than the best
pod so far: such a pod can be neither the fastest nor, unless it decodes far faster, the
cheapest end to end.
"""

from __future__ import annotations

import math
from typing import Final

from backend.scheduling.transfer import distance
from backend.sim.routers.base import Route, RoutingPolicy
from backend.sim.server import Request, Seq, Server
from backend.sim.traces.loader import UNIT_TOKENS

BOUND_FACTOR: Final = 1.5
BOUND_SLACK_S: Final = 0.5
Option = tuple[float, float, float, int, int]  # (ttft s, tpot ms, e2e s, prefill pod, decode pod)


def _load(server: Server) -> int:
    """Uncomputed prompt tokens on the pod: the order in which to try pods."""
    return sum(s.target - s.computed for s in (*server.running, *server.waiting))


class Oracle(RoutingPolicy):
    name = "lookahead-ref"
    reproduces = (
        "none: a myopic look-ahead reference with perfect knowledge of every pod's present state "
        "and the true cost model, blind to later arrivals (not an upper bound)"
    )

    def __init__(self) -> None:
        super().__init__()
        self._pending: dict[int, dict[int, Request]] = {}  # decode pod -> requests on their way

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        if route.prefill is not None:
            self._pending.setdefault(route.pod, {})[req.rid] = req

    def on_first_token(self, req: Request, route: Route, now: float, ttft_ms: float) -> None:
        if route.prefill is not None:
            self._pending.get(route.pod, {}).pop(req.rid, None)

    def _on_the_way(self, pod: int) -> tuple[Seq, ...]:
        """Routed to ``pod`` and not yet there: remote-prefilled requests, in routing order."""
        server = self.view.servers[pod]
        there = {s.req.rid for s in (*server.running, *server.waiting)}
        seqs = []
        for req in self._pending.get(pod, {}).values():
            if req.rid in there:
                continue
            seq = Seq(req)
            seq.remote = True
            seqs.append(seq)
        return tuple(seqs)

    def _choose(self, options: list[Option]) -> tuple[int, int]:
        slo = self.view.slo
        finite = [o for o in options if math.isfinite(o[0])]
        # A one-token answer has no TPOT (NaN) and meets that SLO trivially.
        meets = [o for o in finite if o[0] * 1000.0 <= slo.ttft_ms and not (o[1] > slo.tpot_ms)]
        best = min(meets or finite, key=lambda o: (o[2], o[3], o[4]))
        return best[3], best[4]

    @staticmethod
    def _e2e(req: Request, ttft_s: float, tpot_ms: float) -> float:
        tpot = 0.0 if math.isnan(tpot_ms) else tpot_ms
        return ttft_s + (req.output - 1) * tpot / 1000.0

    def _ahead(
        self, pods: list[int], make: Seq, *, pending: bool = False
    ) -> dict[int, tuple[float, float]]:
        """Look-ahead per pod, least loaded first, each bounded by the best first token so far."""
        v = self.view
        order = sorted(pods, key=lambda p: (_load(v.servers[p]), p))
        best = math.inf
        out: dict[int, tuple[float, float]] = {}
        for p in order:
            horizon = 600.0 if math.isinf(best) else BOUND_FACTOR * best + BOUND_SLACK_S
            ahead = self._on_the_way(p) if pending else ()
            ttft, tpot = v.servers[p].lookahead(make, v.now, horizon_s=horizon, ahead=ahead)
            out[p] = (ttft, tpot)
            best = min(best, ttft)
        return out

    def route(self, req: Request) -> Route:
        v = self.view
        if not v.disaggregated:
            options = [
                (ttft, tpot, self._e2e(req, ttft, tpot), p, p)
                for p, (ttft, tpot) in self._ahead(v.decode_pods, Seq(req)).items()
            ]
            _, pod = self._choose(options)
            return Route(pod, uncached=self.uncached(req, pod))
        prefill = self._ahead(v.prefill_pods, Seq(req, prefill_only=True))
        remote = Seq(req)
        remote.remote = True
        decode = self._ahead(v.decode_pods, remote, pending=True)
        options = []
        for d, (first, tpot) in decode.items():
            server = v.servers[d]
            run = server.prefix_hit_units(req.units)
            tokens = req.prompt - min(run * UNIT_TOKENS, req.prompt)
            kv_bytes = tokens * server.profile.kv_bytes_per_token
            for p, (handoff, _) in prefill.items():
                dist = distance(v.servers[p].topology, server.topology, v.transfer.unknown_distance)
                transfer_s = (
                    v.transfer.latency_ms(dist) + kv_bytes / (v.transfer.bandwidth_gbps(dist) * 1e6)
                ) / 1000.0
                ttft = handoff + transfer_s + first
                options.append((ttft, tpot, self._e2e(req, ttft, tpot), p, d))
        p, d = self._choose(options)
        return Route(d, prefill=p, uncached=self.uncached(req, p))
