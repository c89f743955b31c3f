"""The web side of scheduling: resolve SLOs and priority, predict from memory, decide."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session, sessionmaker

from backend.exceptions import Invalid
from backend.policies import service as policies
from backend.policies.mapping import to_scheduling
from backend.policies.schemas import PolicySpec
from backend.prediction.schemas import columns
from backend.predictor.serving import ModelStore, predict_both
from backend.routing.schemas import CandidateIn, RequestIn
from backend.samples.models import WINDOW_FEATURES
from backend.scheduling.chain import schedule
from backend.scheduling.decided import DecidedLedger
from backend.scheduling.types import (
    Candidate,
    Decision,
    SchedulingPolicy,
    SchedulingRequest,
    Topology,
)

# Upstream's header names, and the deprecated aliases it still accepts.
TTFT_HEADERS = ("x-llm-d-slo-ttft-ms", "x-slo-ttft-ms")
TPOT_HEADERS = ("x-llm-d-slo-tpot-ms", "x-slo-tpot-ms")
OBJECTIVE_HEADERS = ("x-llm-d-inference-objective", "x-gateway-inference-objective")


@dataclass(frozen=True)
class PoolPolicy:
    version: int | None
    spec: PolicySpec
    policy: SchedulingPolicy
    priorities: dict[str, int]


class PolicyCache:
    """Per-pool policy and objective priorities, re-read at most every `ttl_s`.

    Scheduling is on the router's hot path; a database round trip per decision would cost
    more than the decision. Edits through this process invalidate at once; other replicas see
    them within `ttl_s`.
    """

    def __init__(self, sessions: sessionmaker[Session], ttl_s: float = 2.0) -> None:
        self._sessions = sessions
        self._ttl = ttl_s
        self._entries: dict[int, tuple[float, PoolPolicy]] = {}
        self._lock = threading.Lock()

    def fresh(self, pool_id: int) -> PoolPolicy | None:
        """The cached entry while it is fresh, without touching the database."""
        entry = self._entries.get(pool_id)
        return entry[1] if entry is not None and entry[0] > time.monotonic() else None

    def get(self, pool_id: int) -> PoolPolicy:
        cached = self.fresh(pool_id)
        if cached is not None:
            return cached
        with self._sessions() as session:
            row = policies.policy_for_pool(session, pool_id)
            spec = policies.spec_of(row)
            priorities = {o.name: o.priority for o in policies.list_objectives(session, pool_id)}
        value = PoolPolicy(row.version if row else None, spec, to_scheduling(spec), priorities)
        with self._lock:
            self._entries[pool_id] = (time.monotonic() + self._ttl, value)
        return value

    def invalidate(self) -> None:
        with self._lock:
            self._entries.clear()


def first_header(headers: dict[str, str], names: Sequence[str]) -> str | None:
    return next((headers[n] for n in names if n in headers), None)


class BadHeader(Invalid):
    pass


def _slo(
    body: float | None, header: str | None, default: float | None, name: str
) -> tuple[float | None, str]:
    if body is not None:
        return body, "request"
    if header is not None:
        try:
            value = float(header)
        except ValueError:
            raise BadHeader(f"header {name}: not a number: {header!r}") from None
        if not value > 0 or not np.isfinite(value):
            raise BadHeader(f"header {name}: must be a positive number of milliseconds")
        return value, "header"
    if default is not None:
        return default, "policy"
    return None, "none"


@dataclass(frozen=True)
class Resolved:
    request: SchedulingRequest
    slo_source: dict[str, str]
    objective: str | None


def resolve(req: RequestIn, headers: dict[str, str], pool: PoolPolicy) -> Resolved:
    ttft, ttft_src = _slo(
        req.ttft_slo_ms,
        first_header(headers, TTFT_HEADERS),
        pool.spec.default_ttft_slo_ms,
        TTFT_HEADERS[0],
    )
    tpot, tpot_src = _slo(
        req.tpot_slo_ms,
        first_header(headers, TPOT_HEADERS),
        pool.spec.default_tpot_slo_ms,
        TPOT_HEADERS[0],
    )
    objective = req.objective or first_header(headers, OBJECTIVE_HEADERS)
    # An objective the pool does not define gets priority 0, as upstream's EPP does.
    priority = pool.priorities.get(objective, 0) if objective else 0
    scheduling = SchedulingRequest(
        prompt_tokens=req.prompt_tokens,
        ttft_slo_ms=ttft,
        tpot_slo_ms=tpot,
        priority=priority,
        stream=req.stream,
        seed=req.seed,
    )
    return Resolved(scheduling, {"ttft": ttft_src, "tpot": tpot_src}, objective)


def to_candidates(items: Sequence[CandidateIn]) -> list[Candidate]:
    return [
        Candidate(
            name=c.name,
            kv_cache_percentage=c.kv_cache_percentage,
            input_token_length=c.input_token_length,
            num_request_waiting=c.num_request_waiting,
            num_request_running=c.num_request_running,
            prefix_cache_score=c.prefix_cache_score,
            prefill_tokens_in_flight=c.prefill_tokens_in_flight,
            decode_tokens_in_flight=c.decode_tokens_in_flight,
            num_tokens_generated=c.num_tokens_generated,
            role=c.role,
            pod_class=c.pod_class,
            topology=Topology(**c.topology.model_dump()) if c.topology else None,
            dispatched_requests=c.dispatched_requests,
            running_tpot_slos_ms=tuple(c.running_tpot_slos_ms),
            ms_since_last_token=c.ms_since_last_token,
            oldest_prefill_wait_ms=c.oldest_prefill_wait_ms,
            ms_since_last_first_token=c.ms_since_last_first_token,
        )
        for c in items
    ]


_CANDIDATE_FIELDS = tuple(
    f for f in WINDOW_FEATURES if f in {field.name for field in dataclass_fields(Candidate)}
)
"""The wire features a ``Candidate`` carries, and so the ones the library may change (the held
decisions, the interference scorer's counterfactual pods)."""


def candidate_columns(
    base: dict[str, npt.NDArray[Any]], row_of: dict[str, int], candidates: Sequence[Candidate]
) -> dict[str, npt.NDArray[Any]]:
    """The prediction columns of ``candidates``: each one's wire row (``base``, by name) with
    the fields a candidate carries read from the candidate itself."""
    rows = np.fromiter((row_of[c.name] for c in candidates), np.intp, len(candidates))
    cols = {name: column[rows] for name, column in base.items()}
    for name in _CANDIDATE_FIELDS:
        cols[name] = np.fromiter(
            (getattr(c, name) for c in candidates), np.float64, len(candidates)
        )
    return cols


def decide(
    store: ModelStore,
    pool: str,
    items: Sequence[CandidateIn],
    resolved: Resolved,
    policy: SchedulingPolicy,
    ledger: DecidedLedger | None = None,
    now: float = 0.0,
) -> Decision:
    """Predictions come from this process's memory; if the pool has no model the library's
    heuristic fallback decides, and the decision says so.

    With a ``ledger``, the decisions it holds (this process's recent ones, at ``now`` on its
    clock) count in their pods' in-flight work, and this decision is held in turn."""
    base = columns(list(items))
    plain = to_candidates(items)
    candidates = plain if ledger is None else ledger.apply(plain, now)
    row_of = {c.name: i for i, c in enumerate(items)}

    def predictor(
        asked: Sequence[Candidate], __: SchedulingRequest
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
        # The wire rows as they came, the common case, are predicted as they are; candidates
        # the library or the ledger changed (held decisions added, the interference scorer's
        # pods with the request placed) from their own fields.
        as_sent = len(asked) == len(plain) and all(
            a is b for a, b in zip(asked, plain, strict=True)
        )
        cols = base if as_sent else candidate_columns(base, row_of, asked)
        p = predict_both(store, pool, cols)
        # The calibrated TPOT p90 rides along; the tier filter reads it when the policy says so.
        return p.ttft_ms, p.tpot_ms, p.tpot_p90_ms

    decision = schedule(resolved.request, candidates, policy, predictor)
    if ledger is not None and decision.admitted and decision.chosen is not None:
        first = decision.prefill or decision.chosen
        prefix = min(max(items[row_of[first]].prefix_cache_score, 0.0), 1.0)
        ledger.record(
            first, decision.chosen, round(resolved.request.prompt_tokens * (1.0 - prefix)), now
        )
    return decision
