"""The routing-policy interface the simulator drives, and helpers the policies share."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.scheduling.load_chains import pick_extreme
from backend.scheduling.types import Distance
from backend.sim.server import Request
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import RouterView

Row = tuple[float, ...]


@dataclass(slots=True)
class Route:
    """Where a request goes (and what the router predicted for it, if it predicts)."""

    pod: int  # the pod that decodes: the only pod without P/D
    prefill: int | None = None  # P/D: the pod that prefills
    shed: bool = False
    reason: str = ""
    uncached: int = 0  # the router's estimate of the prompt tokens the (prefill) pod computes
    ttft_ms: float = math.nan  # predicted for the chosen pod(s)
    tpot_ms: float = math.nan
    tpot_p90_ms: float = math.nan  # the calibrated p90, where the predictor has one
    ttft_row: Row | None = None  # wire features behind the prediction: the training sample
    tpot_row: Row | None = None


class RoutingPolicy:
    """Base class: ``pick`` one pod among candidates; P/D picks a prefill and a decode pod with
    the same rule applied to each role's pods (how heuristic routers run under P/D)."""

    name = ""
    reproduces = ""  # the upstream version whose behaviour this reproduces
    learns = False  # gets ``tick`` every 10 simulated seconds

    def __init__(self) -> None:
        self._view: RouterView | None = None

    @property
    def view(self) -> RouterView:
        if self._view is None:
            raise RuntimeError("policy not bound to a router view")
        return self._view

    def bind(self, view: RouterView) -> None:
        self._view = view

    def route(self, req: Request) -> Route:
        v = self.view
        if v.disaggregated:
            p = self.pick(req, v.prefill_pods)
            d = self.pick(req, v.decode_pods)
            return Route(d, prefill=p, uncached=self.uncached(req, p))
        pod = self.pick(req, v.decode_pods)
        return Route(pod, uncached=self.uncached(req, pod))

    def pick(self, req: Request, pods: list[int]) -> int:
        raise NotImplementedError

    def uncached(self, req: Request, pod: int) -> int:
        """Prompt tokens the pod will compute, from what its cache holds now."""
        run = self.view.servers[pod].prefix_hit_units(req.units)
        return req.prompt - min(run * UNIT_TOKENS, req.prompt)

    # Hooks the simulator calls; the default is to ignore them.
    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        return None

    def on_first_token(self, req: Request, route: Route, now: float, ttft_ms: float) -> None:
        return None

    def on_handoff(self, req: Request, route: Route, now: float, prefill_ms: float) -> None:
        return None

    def on_transfer(self, kv_bytes: int, distance: Distance, ms: float) -> None:
        return None

    def on_done(self, req: Request, route: Route, now: float, tpot_ms: float | None) -> None:
        return None

    def tick(self, now: float) -> None:
        return None

    def summary(self) -> dict[str, Any]:
        return {}


def pick_best(
    pods: Sequence[int], values: Sequence[float], rng: random.Random, *, lowest: bool
) -> int:
    """The pod with the lowest (or highest) value; exact ties broken uniformly at random (the
    scheduling library's rule, one implementation)."""
    return pods[pick_extreme(values, rng, lowest=lowest)]
