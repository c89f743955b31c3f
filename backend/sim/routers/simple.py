"""Load-only baselines: round robin and least requests."""

from __future__ import annotations

from backend.sim.routers.base import RoutingPolicy, pick_best
from backend.sim.server import Request


class RoundRobin(RoutingPolicy):
    name = "round-robin"
    reproduces = (
        "vllm-project/production-stack a6c01db0 `roundrobin` (a Kubernetes Service behaves alike): "
        "pods in a fixed order, a counter modulo their number; per role under P/D"
    )

    def __init__(self) -> None:
        super().__init__()
        self._next: dict[tuple[int, ...], int] = {}

    def pick(self, req: Request, pods: list[int]) -> int:
        key = tuple(pods)
        i = self._next.get(key, 0)
        self._next[key] = i + 1
        return pods[i % len(pods)]


class LeastRequest(RoutingPolicy):
    name = "least-request"
    reproduces = (
        "vllm-project/aibrix e3e10f9e `least-request`: fewest requests in flight as the gateway "
        "counts them (dispatched, not finished), uniform random among ties"
    )

    def pick(self, req: Request, pods: list[int]) -> int:
        v = self.view
        return pick_best(pods, [v.dispatched[p] for p in pods], v.rng, lowest=True)
