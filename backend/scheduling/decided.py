"""Decisions the router has made that the pods' counts do not show yet.

A request is decided when it arrives and reaches its pod only after the decision returns (the
predictor call, the answer's trip back to the router, the dispatch). Requests decided within
that window do not see one another in the candidates' in-flight counts, so a burst of arrivals
herds onto the one pod that looked best to each of them, and every prediction in the burst is
made for a pod emptier than the one the request will meet. In the simulator that blindness was
most of the live TTFT error on the Azure code trace (docs/benchmarks.md, "Where the live TTFT
error went").

The ledger remembers each decision for ``hold_s`` and adds the ones still held to their pods'
``dispatched_requests`` and ``prefill_tokens_in_flight``, the fields the router's own counters
fill. A router cannot say when its counters caught up, so a decision is held for a fixed time:
held too briefly, a burst is blind again; held beyond the dispatch, the request counts twice
until it ends, which only spreads a burst a little more. One ledger per pool and process: API
replicas each see their own decisions (a router pinned to one replica sees all of its own).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from backend.scheduling.types import Candidate


@dataclass(frozen=True, slots=True)
class Held:
    """One decision: its first pod (prefill, or the only one) gets the request and its
    uncached prompt tokens; a separate decode pod gets the request."""

    expires: float
    first: str
    decode: str
    tokens: int


class DecidedLedger:
    """Decisions held for ``hold_s`` seconds (of the caller's clock), per pod name."""

    def __init__(self, hold_s: float) -> None:
        if not hold_s >= 0:
            raise ValueError("hold_s must be >= 0")
        self.hold_s = hold_s
        self._held: deque[Held] = deque()
        self._requests: dict[str, int] = {}
        self._tokens: dict[str, int] = {}
        # /v1/schedule decides on several threads at once; the simulator on one.
        self._lock = threading.Lock()

    def record(self, first: str, decode: str, tokens: int, now: float) -> None:
        if self.hold_s <= 0:
            return
        with self._lock:
            self._expire(now)
            self._held.append(Held(now + self.hold_s, first, decode, tokens))
            self._count(first, decode, tokens, +1)

    def pending(self, pod: str, now: float) -> tuple[int, int]:
        """(requests, uncached prompt tokens) held for ``pod`` at ``now``."""
        with self._lock:
            self._expire(now)
            return self._requests.get(pod, 0), self._tokens.get(pod, 0)

    def apply(self, candidates: Sequence[Candidate], now: float) -> list[Candidate]:
        """The candidates as the router would see them had its counters caught up: the held
        decisions added to their in-flight requests and prefill tokens. Candidates with none
        held are returned as they are (the same objects)."""
        with self._lock:
            self._expire(now)
            if not self._requests:
                return list(candidates)
            out = []
            for c in candidates:
                requests = self._requests.get(c.name, 0)
                if requests == 0:
                    out.append(c)
                    continue
                out.append(
                    replace(
                        c,
                        dispatched_requests=c.in_flight + requests,
                        prefill_tokens_in_flight=c.prefill_tokens_in_flight
                        + self._tokens.get(c.name, 0),
                    )
                )
            return out

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def _expire(self, now: float) -> None:
        while self._held and self._held[0].expires <= now:
            h = self._held.popleft()
            self._count(h.first, h.decode, h.tokens, -1)

    def _count(self, first: str, decode: str, tokens: int, sign: int) -> None:
        self._add(self._requests, first, sign)
        self._add(self._tokens, first, sign * tokens)
        if decode != first:
            self._add(self._requests, decode, sign)

    @staticmethod
    def _add(counts: dict[str, int], pod: str, delta: int) -> None:
        value = counts.get(pod, 0) + delta
        if value:
            counts[pod] = value
        else:
            counts.pop(pod, None)
