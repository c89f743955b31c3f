"""Ingestion rate limits per client address: the second line of defence against a flood.

The first line is the network (the data-plane listener and the client allow-list). This one
bounds how fast any one address can write into the windows, counted in request-body bytes: the
cost is known before the body is parsed (so a refused flood costs no parsing) and no JSON
spelling can make it cheaper. A sliding-window counter (the `limits` library) in Redis is shared
by every replica; the embedded mode keeps it in memory. Only ingestion routes call it: the
prediction path never does.

Sizing: the EPP posts at most `LATENCY_MAX_SAMPLE_SIZE` entries (the chart: 10,000) once a
second, about 3-4 MB, however many pods it routes to. The default allows twice that sustained,
with a window of two seconds so that a delayed flush followed by an on-time one passes.
"""

from __future__ import annotations

import logging
import math
import time

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter
from starlette.concurrency import run_in_threadpool

from backend.settings import IngestSettings

log = logging.getLogger("headroom.ingest")


class IngestLimiter:
    """Bytes per client address over a sliding window. The synchronous client, called off the
    event loop: an asyncio Redis connection would belong to one loop, and ingestion already
    hands its write to the thread pool."""

    def __init__(self, settings: IngestSettings, redis_url: str | None) -> None:
        window = settings.client_window_s
        self.item: RateLimitItem | None = None
        if settings.client_bytes_per_s > 0:
            self.item = RateLimitItemPerSecond(settings.client_bytes_per_s * window, window)
        storage = (
            storage_from_string("memory://")
            if redis_url is None
            else storage_from_string(redis_url, key_prefix="headroom-ingest")
        )
        self._limiter = SlidingWindowCounterRateLimiter(storage)

    def check(self, client: str, cost: int) -> float | None:
        """None when `client` may send `cost` more bytes now; else the seconds to wait.

        A Redis outage admits (and logs): losing the limit for a while is better than losing
        every pod's samples."""
        if self.item is None:
            return None
        try:
            if self._limiter.hit(self.item, client, cost=max(1, cost)):
                return None
            stats = self._limiter.get_window_stats(self.item, client)
        except Exception:
            log.warning("ingestion rate limit unavailable; admitting", exc_info=True)
            return None
        return max(1.0, math.ceil(stats.reset_time - time.time()))

    async def admit(self, client: str, cost: int) -> float | None:
        if self.item is None:
            return None
        return await run_in_threadpool(self.check, client, cost)
