"""What the simulated router knows: scraped pod gauges, its own in-flight counts, the pool shape.

Gauges (KV-cache usage, waiting and running requests) are scraped from each pod every
``scrape_interval_s`` (llm-d's ``RefreshMetricsInterval``, 50 ms), each pod on its own phase, so
the router sees every pod as it was at its last scrape, up to 50 ms ago (``scrape_interval_s =
0``, for measurement only: the pods' present gauges, which no router can read). The router's own
counts are exact and immediate, as they are in a real router: requests dispatched to a pod and
not yet finished, uncached prompt tokens dispatched and not yet past their first token
(upstream's in-flight load), and prompt tokens of requests in decode; and, as a router that
proxies the pods' streams sees it, when each pod last streamed a token and a first token, and
since when its requests before their first token have waited (``progress``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from backend.scheduling.types import TransferConfig
from backend.sim.server import Metrics, Server


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float
    tpot_ms: float


@dataclass(slots=True)
class RouterView:
    servers: list[Server]
    slo: Slo
    rng: random.Random
    transfer: TransferConfig  # the fabric's true constants (only the oracle may read them)
    scrape_interval_s: float = 0.05
    now: float = 0.0
    phases: list[float] = field(default_factory=list)
    dispatched: list[int] = field(default_factory=list)
    prefill_inflight: list[int] = field(default_factory=list)
    decode_inflight: list[int] = field(default_factory=list)
    prefill_since: list[dict[int, float]] = field(default_factory=list)
    """Per pod: request id -> dispatch time, for the requests not yet past their first token."""
    first_token_at: list[float] = field(default_factory=list)
    """Per pod: when it last streamed a request's first token (a prefill finished); -1: never."""
    prefill_pods: list[int] = field(default_factory=list)
    decode_pods: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.servers)
        if not self.phases:
            self.phases = [self.rng.random() * self.scrape_interval_s for _ in range(n)]
        self.dispatched = [0] * n
        self.prefill_inflight = [0] * n
        self.decode_inflight = [0] * n
        self.prefill_since = [{} for _ in range(n)]
        self.first_token_at = [-1.0] * n
        self.prefill_pods = [s.index for s in self.servers if s.role == "prefill"]
        self.decode_pods = [s.index for s in self.servers if s.role != "prefill"]

    @property
    def disaggregated(self) -> bool:
        return bool(self.prefill_pods) and bool(self.decode_pods)

    def last_scrape(self, pod: int) -> float:
        if self.scrape_interval_s <= 0:
            # A measurement option, not a router: the gauges read as the pods hold them now.
            return self.now
        phase = self.phases[pod]
        if self.now < phase:
            return -1.0
        return phase + math.floor((self.now - phase) / self.scrape_interval_s) * (
            self.scrape_interval_s
        )

    def scraped(self, pod: int) -> Metrics:
        return self.servers[pod].metrics_at(self.last_scrape(pod))

    def progress(self, pod: int) -> tuple[float, float, float]:
        """The wire's ``ms_since_last_token``, ``oldest_prefill_wait_ms`` and
        ``ms_since_last_first_token`` for ``pod``: what a router proxying its streams knows of
        how far its work has got (all 0 with nothing in flight; the last 0 if the pod has never
        streamed a first token)."""
        if not self.dispatched[pod]:
            return 0.0, 0.0, 0.0
        since = (self.now - self.servers[pod].last_streamed(self.now)) * 1000.0
        started = self.prefill_since[pod]
        oldest = (self.now - min(started.values())) * 1000.0 if started else 0.0
        first = self.first_token_at[pod]
        since_first = (self.now - first) * 1000.0 if first >= 0.0 else 0.0
        return max(since, 0.0), max(oldest, 0.0), max(since_first, 0.0)
