"""What the pool looks like now, from the samples the EPP posts: each pod's latest gauges and a
rolling profile of the requests it served.

Read incrementally by sample id, so every API replica can keep its own copy from the shared
database with one indexed range scan a tick, and so that ingestion's hot path does nothing
extra. A pod not heard from for ``stale_after_s`` (by its samples' time) is left out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from backend.predictor.features import POD_TYPE_CODES
from backend.samples.models import TargetCode
from backend.scheduling.record import Outcomes
from backend.scheduling.saturation import Arrivals, Representative, Served
from backend.scheduling.types import Candidate, Role
from backend.sim.pairing import DISPATCH_LOAD, Pairing, answer_length

# Arrival times kept per pool at most (a minute's worth of reads at the profile's row limit).
MAX_ARRIVALS_KEPT = 16_384

# The roles the scheduling chain places requests on; an encode-only pod serves no LLM request.
_ROLES: dict[int, Role] = {POD_TYPE_CODES[r]: r for r in ("", "prefill", "decode")}


@dataclass(frozen=True, slots=True)
class PodGauges:
    name: str
    observed_at: datetime
    kv_cache_percentage: float
    num_request_waiting: int
    num_request_running: int
    prefill_tokens_in_flight: int
    decode_tokens_in_flight: int
    role: Role
    pod_class: str | None
    ms_since_last_token: float = 0.0
    oldest_prefill_wait_ms: float = 0.0
    ms_since_last_first_token: float = 0.0

    def candidate(self) -> Candidate:
        return Candidate(
            name=self.name,
            kv_cache_percentage=self.kv_cache_percentage,
            input_token_length=0,  # replaced by each representative request's
            num_request_waiting=self.num_request_waiting,
            num_request_running=self.num_request_running,
            prefix_cache_score=0.0,
            prefill_tokens_in_flight=self.prefill_tokens_in_flight,
            decode_tokens_in_flight=self.decode_tokens_in_flight,
            role=self.role,
            pod_class=self.pod_class,
            # The pod's progress as its latest sample saw it: a representative request is
            # placed on the pod at one instant of its work, as a routed one is.
            ms_since_last_token=self.ms_since_last_token,
            oldest_prefill_wait_ms=self.oldest_prefill_wait_ms,
            ms_since_last_first_token=self.ms_since_last_first_token,
        )


@dataclass
class PoolSignals:
    """One pool's pods and recent requests, updated from sample rows."""

    profile_size: int
    pods: dict[str, PodGauges] = field(default_factory=dict)
    requests: deque[Representative] = field(init=False)
    output_tokens: deque[int] = field(init=False)
    # Per TTFT sample (arrival time: its observation less its TTFT, requests it stands for,
    # requests on its pod, seconds to the first token); per TPOT sample (observation, requests
    # on its pod, seconds per output token). The pod's count is its sample's running +
    # waiting; the replay's latency tables are scaled to the seconds (``Served``).
    arrivals: deque[tuple[datetime, float, float, float]] = field(init=False)
    served_tpot: deque[tuple[datetime, float, float]] = field(init=False)
    # The same samples for the level's record, as plain numbers (seconds since the epoch):
    # (arrival, weight, TTFT ms) and (first token: the observation less the decode where the
    # sample carries its length, else its matched TTFT sample's time, else the observation;
    # TPOT ms), read into arrays every tick.
    ttft_outcomes: deque[tuple[float, float, float]] = field(init=False)
    tpot_outcomes: deque[tuple[float, float]] = field(init=False)
    # Open TTFT samples, to match each TPOT sample to its request's (backend/sim/pairing.py).
    pairing: Pairing[None] = field(init=False)
    arrival_weight: float = 1.0
    """Requests each TTFT row read now stands for: more than 1 when a tick's read was cut to
    the newest rows (set by the monitor from the count of the pool's TTFT rows)."""

    def __post_init__(self) -> None:
        self.requests = deque(maxlen=self.profile_size)
        self.output_tokens = deque(maxlen=self.profile_size)
        self.arrivals = deque(maxlen=MAX_ARRIVALS_KEPT)
        self.served_tpot = deque(maxlen=MAX_ARRIVALS_KEPT)
        self.ttft_outcomes = deque(maxlen=MAX_ARRIVALS_KEPT)
        self.tpot_outcomes = deque(maxlen=MAX_ARRIVALS_KEPT)
        self.pairing = Pairing(max_open=MAX_ARRIVALS_KEPT)

    def add(self, row: Any, *, profile: bool = True, gauges: bool = True) -> None:
        if profile:
            held = float(row.num_request_running + row.num_request_waiting)
            if row.target == TargetCode.TTFT:
                self.requests.append(Representative(row.input_token_length, row.prefix_cache_score))
                arrived = _utc(row.observed_at) - timedelta(milliseconds=row.latency_ms)
                self.arrivals.append((arrived, self.arrival_weight, held, row.latency_ms / 1000.0))
                self.ttft_outcomes.append(
                    (arrived.timestamp(), self.arrival_weight, row.latency_ms)
                )
                self.pairing.first_token(
                    _utc(row.observed_at).timestamp(),
                    row.pod,
                    row.input_token_length,
                    _load(row),
                    None,
                    row.pod_type,
                )
            else:
                self._tpot(row, held)
        if not gauges or not row.pod or row.pod_type not in _ROLES:
            return  # an unnamed pod cannot be told apart from another; an encoder is no target
        observed = _utc(row.observed_at)
        seen = self.pods.get(row.pod)
        if seen is not None and seen.observed_at > observed:
            return  # an older observation posted late
        self.pods[row.pod] = PodGauges(
            name=row.pod,
            observed_at=observed,
            kv_cache_percentage=row.kv_cache_percentage,
            num_request_waiting=row.num_request_waiting,
            num_request_running=row.num_request_running,
            prefill_tokens_in_flight=row.prefill_tokens_in_flight,
            decode_tokens_in_flight=row.decode_tokens_in_flight,
            role=_ROLES[row.pod_type],
            pod_class=row.pod_class,
            ms_since_last_token=row.ms_since_last_token,
            oldest_prefill_wait_ms=row.oldest_prefill_wait_ms,
            ms_since_last_first_token=row.ms_since_last_first_token,
        )

    def _tpot(self, row: Any, held: float) -> None:
        observed = _utc(row.observed_at)
        done_s = observed.timestamp()
        tokens = row.num_tokens_generated
        if not row.latency_ms > 0:
            return
        # Its request's TTFT sample dates its first token. Upstream's EPP sends one TPOT sample
        # at the end of a streamed answer with num_tokens_generated 0 (1 in some versions), so
        # that is the only way its length is known.
        match = self.pairing.done(done_s, row.pod, row.input_token_length, _load(row), row.pod_type)
        if tokens > 1:  # the answer's length, as Headroom's own clients send it
            first_s = done_s - row.latency_ms * (tokens - 1) / 1000.0
        elif match is not None:
            first_s = match[0]
            tokens = answer_length(first_s, done_s, row.latency_ms)
        else:
            # Matched to no TTFT sample (lost, or cut from a tick's read): the record takes it
            # at its end, later than its first token by the decode (docs/capacity.md).
            first_s = done_s
        self.tpot_outcomes.append((first_s, row.latency_ms))
        if tokens > 1:  # one token has no time between tokens
            self.output_tokens.append(tokens)
            self.served_tpot.append((observed, held, row.latency_ms / 1000.0))

    def mean_output_tokens(self) -> float | None:
        """The profile's mean answer length; None where no sample said one."""
        return float(np.mean(self.output_tokens)) if self.output_tokens else None

    def recent_arrivals(self, now: datetime, window_s: float) -> Arrivals:
        """The requests that arrived over the last ``window_s``, with the mean output length
        of the profile's requests and what the window's samples measured."""
        output = self.mean_output_tokens() or 1.0
        start = now - timedelta(seconds=window_s)
        inside = sorted(a for a in self.arrivals if start < a[0] <= now)
        served = Served(
            tuple((n, s) for _, _, n, s in inside),
            tuple((n, s) for t, n, s in self.served_tpot if start < t <= now),
        )
        return Arrivals(
            tuple((a[0] - start).total_seconds() for a in inside),
            window_s,
            output,
            tuple(a[1] for a in inside),
            served,
        )

    def outcomes(self) -> Outcomes:
        """What the kept samples measured, for the level's record (times in seconds since the
        epoch): each TTFT sample's arrival, weight and TTFT; each TPOT sample's first token and
        TPOT."""
        ttft = np.array(self.ttft_outcomes, np.float64).reshape(-1, 3)
        tpot = np.array(self.tpot_outcomes, np.float64).reshape(-1, 2)
        return Outcomes(ttft[:, 0], ttft[:, 1], ttft[:, 2], tpot[:, 0], tpot[:, 1])

    def fresh_pods(self, now: datetime, stale_after_s: float) -> tuple[list[PodGauges], list[str]]:
        """(pods heard from within ``stale_after_s``, names of the stale ones), by name."""
        cutoff = now - timedelta(seconds=stale_after_s)
        fresh = sorted((p for p in self.pods.values() if p.observed_at >= cutoff), key=_name)
        stale = sorted(p.name for p in self.pods.values() if p.observed_at < cutoff)
        return fresh, stale


def _load(row: Any) -> tuple[int, ...]:
    return tuple(int(getattr(row, name)) for name in DISPATCH_LOAD)


def _utc(moment: datetime) -> datetime:
    # PostgreSQL's `timestamp` and SQLite hand back naive datetimes; ingestion stores UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _name(p: PodGauges) -> str:
    return p.name


def apply(
    signals: dict[int, PoolSignals],
    rows: Iterable[Any],
    profile_size: int,
    *,
    profile: bool = True,
    gauges: bool = True,
) -> int:
    """Feeds rows (oldest first) into their pools' signals: the request profile, the pods'
    gauges or both; returns the highest id seen (0 for none)."""
    top = 0
    for row in rows:
        pool = signals.get(row.pool_id)
        if pool is None:
            pool = signals[row.pool_id] = PoolSignals(profile_size)
        pool.add(row, profile=profile, gauges=gauges)
        top = max(top, row.id)
    return top
