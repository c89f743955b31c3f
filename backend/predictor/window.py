"""The stratified window's bucketing: pure arithmetic, shared by ingestion, stats and training."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import cached_property

from backend.settings import WindowSettings

# Guards against 0.3 / 0.1 == 2.9999999999999996 putting a value on an edge into the lower bucket.
_EPS = 1e-9


@dataclass(frozen=True)
class WindowSpec:
    kv_step: float
    prefix_step: float
    queue_edges: tuple[int, ...]
    cap: int

    @classmethod
    def from_settings(cls, s: WindowSettings) -> WindowSpec:
        return cls(s.kv_step, s.prefix_step, tuple(s.queue_band_edges), s.cap)

    # Cached: `bucket` runs for every ingested sample.
    @cached_property
    def n_kv(self) -> int:
        return math.ceil(1 / self.kv_step - _EPS)

    @cached_property
    def n_prefix(self) -> int:
        return math.ceil(1 / self.prefix_step - _EPS)

    @property
    def n_queue(self) -> int:
        return len(self.queue_edges) + 1

    @property
    def n_buckets(self) -> int:
        return self.n_kv * self.n_prefix * self.n_queue

    def bucket(self, kv: float, prefix: float, waiting: int) -> int:
        k = min(int(kv / self.kv_step + _EPS), self.n_kv - 1)
        p = min(int(prefix / self.prefix_step + _EPS), self.n_prefix - 1)
        q = bisect.bisect_right(self.queue_edges, waiting)
        return (q * self.n_kv + k) * self.n_prefix + p

    def split(self, bucket: int) -> tuple[int, int, int]:
        """(kv index, prefix index, queue band) of a bucket id."""
        rest, p = divmod(bucket, self.n_prefix)
        q, k = divmod(rest, self.n_kv)
        return k, p, q

    def ranges(
        self, bucket: int
    ) -> tuple[tuple[float, float], tuple[float, float], tuple[int, int | None]]:
        k, p, q = self.split(bucket)
        kv = (round(k * self.kv_step, 6), round(min(1.0, (k + 1) * self.kv_step), 6))
        pre = (round(p * self.prefix_step, 6), round(min(1.0, (p + 1) * self.prefix_step), 6))
        lows = (0, *self.queue_edges)
        high = self.queue_edges[q] - 1 if q < len(self.queue_edges) else None
        return kv, pre, (lows[q], high)
