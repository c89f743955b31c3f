"""A request's two samples told apart from other requests': its TTFT sample (posted at the
first token) matched to its TPOT sample (posted at the end), so that its answer's length and
first token are known although no sample carries a request id or, from upstream's EPP, a length.

Pure: used by the replay builder (``backend.sim.fromsamples``) and by the capacity monitor's
live profile (``backend.capacity.signals``), one way for both.

What the two samples share, on the wire as it is:

* the pod and the prompt's length (``input_token_length``), always;
* the dispatch-time load: upstream's EPP (llm-d-router HEAD) sends the TPOT sample with the
  in-flight and running values captured at dispatch, as the TTFT sample has them. Older EPPs
  read ``num_request_running`` from the latest scrape instead.

What differs, so it is never part of the match: upstream's TPOT sample has
``prefix_cache_score`` 0, ``num_tokens_generated`` 0 and KV and queue gauges refreshed at the
last chunk; Headroom's own samples carry the length on the TPOT sample only.

So a TPOT sample is matched to the oldest open TTFT sample of its pod and prompt length taken
before it whose dispatch-time load is also equal, else to the oldest of its pod and prompt
length. Where two open requests share both, matching the wrong one swaps their decode times:
each length is off, their sum is not.

Under P/D disaggregation upstream's EPP attributes a request's TTFT sample to the prefill
endpoint (its pod, gauges and ``pod_type`` "prefill") and its TPOT sample to the decode
endpoint: the two never share a pod. A prefill pod's TTFT samples are therefore kept by prompt
length alone, and a decode pod's TPOT sample that finds no TTFT sample of its own pod (a
request the decode pod served whole) takes the oldest open one of any prefill pod with its
prompt length. The dispatch-time loads are two endpoints' then, so they are not compared.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from backend.predictor.features import POD_TYPE_CODES

Ref = TypeVar("Ref")

PREFILL: Final = POD_TYPE_CODES["prefill"]
DECODE: Final = POD_TYPE_CODES["decode"]
_ANY_PREFILL: Final = "\x00prefill"
"""The pod of the key under which prefill pods' TTFT samples wait (no pod name holds a NUL)."""

DISPATCH_LOAD: Final = ("num_request_running", "prefill_tokens_in_flight")
"""The wire fields both of a request's samples carry as they were at dispatch."""

OPEN_FOR_S: Final = 1800.0
"""A TTFT sample still unmatched after this long is dropped: its TPOT sample was lost (or the
answer had one token), and it would only be matched to a later request's by mistake."""
MAX_OPEN: Final = 1 << 16
"""Open TTFT samples kept at most (the oldest go first)."""


@dataclass(slots=True, eq=False)  # by identity: two requests' samples may hold equal values
class _Open(Generic[Ref]):
    time_s: float
    load: Hashable
    ref: Ref
    matched: bool = False


@dataclass
class Pairing(Generic[Ref]):
    """Open TTFT samples by (pod, prompt length), each with what the caller wants back."""

    open_for_s: float = OPEN_FOR_S
    max_open: int = MAX_OPEN
    _by_key: dict[tuple[str | None, int], deque[_Open[Ref]]] = field(default_factory=dict)
    _order: deque[tuple[tuple[str | None, int], _Open[Ref]]] = field(default_factory=deque)
    _open: int = 0

    def first_token(
        self,
        time_s: float,
        pod: str | None,
        prompt: int,
        load: Hashable,
        ref: Ref,
        pod_type: int = 0,
    ) -> None:
        """A TTFT sample observed at ``time_s`` (``load``: its dispatch-time load;
        ``pod_type``: its wire code, ``PREFILL`` for a P/D prefill endpoint's)."""
        key = (_ANY_PREFILL if pod_type == PREFILL else pod, prompt)
        entry = _Open(time_s, load, ref)
        self._by_key.setdefault(key, deque()).append(entry)
        self._order.append((key, entry))
        self._open += 1
        self._prune(time_s)

    def done(
        self, time_s: float, pod: str | None, prompt: int, load: Hashable, pod_type: int = 0
    ) -> tuple[float, Ref] | None:
        """A TPOT sample observed at ``time_s``: (its TTFT sample's time, its ref), or None
        when no open TTFT sample can be its request's. A ``DECODE`` pod's sample falls back
        on the prefill pods' open TTFT samples (P/D, the module's doc)."""
        match = self._take((pod, prompt), time_s, load)
        if match is None and pod_type == DECODE:
            match = self._take((_ANY_PREFILL, prompt), time_s, None)
        return match

    def _take(
        self, key: tuple[str | None, int], time_s: float, load: Hashable | None
    ) -> tuple[float, Ref] | None:
        """The key's oldest open TTFT sample before ``time_s``, one of load ``load`` first
        (None: any)."""
        queue = self._by_key.get(key)
        if not queue:
            return None
        chosen = None
        for entry in queue:
            if entry.time_s > time_s:
                continue  # a first token after this answer's end is another request's
            if load is not None and entry.load == load:
                chosen = entry
                break
            if chosen is None:
                chosen = entry
        if chosen is None:
            return None
        queue.remove(chosen)
        chosen.matched = True
        self._open -= 1
        if not queue:
            del self._by_key[key]
        return chosen.time_s, chosen.ref

    def __len__(self) -> int:
        return self._open

    def _prune(self, now_s: float) -> None:
        # ``_order`` is in arrival order; matched entries are skipped as they surface.
        while self._order:
            key, entry = self._order[0]
            if entry.matched:
                self._order.popleft()
                continue
            if entry.time_s >= now_s - self.open_for_s and self._open <= self.max_open:
                return
            self._order.popleft()
            self._open -= 1
            queue = self._by_key.get(key)
            if queue is not None:
                queue.remove(entry)
                if not queue:
                    del self._by_key[key]


def answer_length(first_s: float, done_s: float, tpot_ms: float) -> int:
    """The answer's tokens from its first token's and its end's times and its mean time per
    output token (upstream's label: (end - first) / (chunks - 1)); at least 2, as a TPOT
    sample is only posted for an answer of more than one token."""
    return 1 + max(1, round((done_s - first_s) * 1000.0 / tpot_ms))
