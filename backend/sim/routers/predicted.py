"""Predicted-latency routing through Headroom's scheduling library, trained online.

One class serves both llm-d's chain as upstream ships it and ours; they differ only in their
``PredictedConfig``. Per request the router builds the upstream wire features of every
candidate (scraped gauges, its own in-flight counts, a prefix score), calls
``backend.scheduling.schedule`` with the online predictor, and remembers the chosen pod's
features; the measured TTFT and TPOT come back as training samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from backend.predictor.features import POD_TYPE_CODES
from backend.predictor.regressors import Kind, TrainParams
from backend.scheduling import Candidate, SchedulingRequest, TransferModel, schedule
from backend.scheduling.decided import DecidedLedger
from backend.scheduling.types import Distance, SchedulingPolicy
from backend.sim.online import OnlinePredictor, columns
from backend.sim.routers.base import Route, RoutingPolicy, Row
from backend.sim.routers.prefix_index import ApproxPrefixIndex, block_share
from backend.sim.server import Request
from backend.sim.traces.loader import UNIT_TOKENS
from backend.sim.view import RouterView

LIVE_BIN_S = 60.0


@dataclass(frozen=True)
class PredictedConfig:
    policy: SchedulingPolicy = field(default_factory=SchedulingPolicy)
    kind: Kind = "hybrid"
    params: TrainParams | None = None
    prefix: Literal["approx", "precise"] = "approx"
    """approx: llm-d's routing-history index; precise: the pods' caches (KV events)."""
    pd_ttft_label: Literal["client", "prefill"] = "client"
    """P/D TTFT sample: what the client saw (upstream: transfer smeared into the label) or the
    prefill pod's own time (ours: transfer is learned apart by the TransferModel)."""
    learn_transfer: bool = False
    send_slo: bool = True
    """Requests carry the run's SLO headers; without them the chain picks the lowest predicted
    latency (upstream's routing-only mode, as in its published benchmark)."""
    train_tpot: bool = True
    """The routing-only mode trains TTFT only."""
    live_calibration: bool = False
    """Headroom's: the served mean corrected and the p90 spread from the live residuals
    (backend/predictor/calibration.py). Upstream serves the model's prediction as it is."""
    per_class: bool = False
    """One model per GPU class (profile) rather than one per pool: in the service, a pool per
    class. The wire features carry no GPU class, so one model averages A100 and H100 pods."""
    send_progress: bool = False
    """The router sends the pods' progress (``ms_since_last_token``, ``oldest_prefill_wait_ms``,
    ``ms_since_last_first_token``: Headroom's optional wire fields, what a router proxying the
    streams knows; issue 17).
    Upstream's EPP does not: its rows carry 0."""
    decided_hold_ms: float = 0.0
    """How long a request this router has decided counts in its pod's in-flight work
    (``prefill_tokens_in_flight``, ``dispatched_requests``) from the decision on, through the
    service's ``DecidedLedger`` (backend/scheduling/decided.py), as ``/v1/schedule`` holds its
    own decisions. 0: a decision counts only once it is dispatched, as in upstream's EPP, so
    requests decided concurrently do not see each other (issue 17: on Azure code at load 4,
    13 % of requests had such a twin on their pod, and their TTFT error was 48 % against 17 %
    for the rest)."""


def candidate_row(c: Candidate) -> Row:
    """``router_row`` from a candidate's own wire fields (equal for the candidates ``route``
    builds; used for candidates the library derives, such as counterfactual pods)."""
    return (
        c.kv_cache_percentage,
        float(c.input_token_length),
        float(c.num_request_waiting),
        float(c.num_request_running),
        c.prefix_cache_score,
        float(c.prefill_tokens_in_flight),
        float(c.decode_tokens_in_flight),
        float(c.num_tokens_generated),
        float(POD_TYPE_CODES[c.role]),
        c.ms_since_last_token,
        c.oldest_prefill_wait_ms,
        c.ms_since_last_first_token,
    )


def router_row(
    v: RouterView,
    req: Request,
    pod: int,
    prefix: float,
    decided_tokens: int = 0,
    progress: bool = False,
) -> Row:
    """What the router knows of ``pod`` for ``req`` right now, in ``online.FIELDS`` order
    (``decided_tokens``: uncached prompt tokens it has decided for the pod, not yet dispatched;
    ``progress``: it sends the pod's progress fields, else they are 0 as upstream's EPP sends
    them)."""
    g = v.scraped(pod)
    return (
        g.kv_cache_usage,
        float(req.prompt),
        float(g.num_waiting),
        float(g.num_running),
        prefix,
        float(v.prefill_inflight[pod] + decided_tokens),
        float(v.decode_inflight[pod]),
        1.0,
        float(POD_TYPE_CODES[v.servers[pod].role]),
        *(v.progress(pod) if progress else (0.0, 0.0, 0.0)),
    )


class PredictedLatency(RoutingPolicy):
    learns = True

    def __init__(self, name: str, reproduces: str, config: PredictedConfig, seed: int = 0) -> None:
        super().__init__()
        self.name = name
        self.reproduces = reproduces
        self.config = config
        self._seed = seed
        self.predictors: dict[str, OnlinePredictor] = {}
        self._class_of: list[str] = []  # per pod: its predictor's key
        self.transfer = TransferModel(config.policy.transfer)
        self._index: ApproxPrefixIndex | None = None
        self._names: list[str] = []
        self._cols: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
        # (TTFT, TPOT, calibrated TPOT p90: NaN where the predictor has none), per candidate.
        self._pred: (
            tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]] | None
        ) = None
        self._candidates: list[Candidate] = []
        self.decisions = 0
        self.fallbacks = 0
        self.shed = 0
        self._live: dict[str, dict[int, list[float]]] = {"ttft": {}, "tpot": {}}
        # Decisions held until the pods' counts show them (``decided_hold_ms``).
        self._ledger = DecidedLedger(config.decided_hold_ms / 1000.0)

    @property
    def _pods(self) -> list[int]:
        """The pods to decide among, read from the view at each decision: an autoscaler
        (backend/sim/autoscale.py) changes the routable pods in place, a P/D pool's per role."""
        v = self.view
        return (v.prefill_pods + v.decode_pods) if v.disaggregated else v.decode_pods

    def bind(self, view: RouterView) -> None:
        super().bind(view)
        self._names = [s.name for s in view.servers]
        self._class_of = [s.profile.name if self.config.per_class else "" for s in view.servers]
        for key in dict.fromkeys(self._class_of):
            self.predictors[key] = OnlinePredictor(
                kind=self.config.kind,
                params=self.config.params,
                seed=self._seed,
                live_calibration=self.config.live_calibration,
            )
        if self.config.prefix == "approx":
            caps = [s.profile.kv_capacity_tokens // UNIT_TOKENS for s in view.servers]
            self._index = ApproxPrefixIndex(len(view.servers), caps)

    def _prefix_scores(self, req: Request) -> list[float]:
        if self._index is not None:
            return self._index.scores(req.units, self._pods, req.prompt)
        servers = self.view.servers
        return [block_share(servers[p].prefix_hit_units(req.units), req.prompt) for p in self._pods]

    def _predict(
        self, candidates: Sequence[Candidate], request: object
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        # The library calls back with the candidates it was given, in order: the columns were
        # built for exactly those when the candidates were. Any other list (the interference
        # scorer's counterfactual pods) is predicted from its own wire fields and not remembered
        # as the route's prediction.
        if candidates is self._candidates:
            self._pred = self._predict_cols(self._cols)
            return self._pred
        rows = [candidate_row(c) for c in candidates]
        return self._predict_cols(columns(np.asarray(rows, dtype=np.float64)))

    def _predict_cols(
        self, cols: dict[str, np.ndarray[Any, np.dtype[np.float64]]]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        if len(self.predictors) == 1:
            predictor = next(iter(self.predictors.values()))
            ttft, tpot = predictor.predict(cols)
            return ttft, tpot, predictor.tpot_p90(cols, tpot)
        classes = [self._class_of[p] for p in self._pods]
        ttft = np.empty(len(classes))
        tpot = np.empty(len(classes))
        p90 = np.full(len(classes), np.nan)
        for key, predictor in self.predictors.items():
            mask = np.asarray([c == key for c in classes])
            if mask.any():
                sub = {name: col[mask] for name, col in cols.items()}
                ttft[mask], tpot[mask] = predictor.predict(sub)
                p90[mask] = predictor.tpot_p90(sub, tpot[mask])
        return ttft, tpot, p90

    def _ready(self) -> bool:
        return all(p.ready() for p in self.predictors.values())

    def route(self, req: Request) -> Route:
        v = self.view
        pods = self._pods
        prefix = self._prefix_scores(req)
        rows: list[Row] = []
        candidates: list[Candidate] = []
        for p, pre in zip(pods, prefix, strict=True):
            g = v.scraped(p)
            server = v.servers[p]
            held, decided = self._ledger.pending(server.name, v.now)
            rows.append(router_row(v, req, p, pre, decided, self.config.send_progress))
            since, oldest, since_first = rows[-1][-3:]
            candidates.append(
                Candidate(
                    name=server.name,
                    kv_cache_percentage=g.kv_cache_usage,
                    input_token_length=req.prompt,
                    num_request_waiting=g.num_waiting,
                    num_request_running=g.num_running,
                    prefix_cache_score=pre,
                    prefill_tokens_in_flight=v.prefill_inflight[p] + decided,
                    decode_tokens_in_flight=v.decode_inflight[p],
                    role=server.role,  # type: ignore[arg-type]
                    pod_class=server.profile.name,
                    topology=server.topology,
                    dispatched_requests=v.dispatched[p] + held,
                    ms_since_last_token=since,
                    oldest_prefill_wait_ms=oldest,
                    ms_since_last_first_token=since_first,
                )
            )
        self._cols = columns(np.asarray(rows, dtype=np.float64))
        self._candidates = candidates
        self._pred = None
        request = SchedulingRequest(
            prompt_tokens=req.prompt,
            ttft_slo_ms=v.slo.ttft_ms if self.config.send_slo else None,
            tpot_slo_ms=v.slo.tpot_ms if self.config.send_slo else None,
            priority=req.priority,
            stream=True,
            seed=v.rng.getrandbits(32),
        )
        decision = schedule(
            request,
            candidates,
            self.config.policy,
            self._predict if self._ready() else None,
            transfer_model=self.transfer,
        )
        self.decisions += 1
        self.fallbacks += decision.fallback
        if not decision.admitted or decision.chosen is None:
            self.shed += 1
            return Route(pods[0], shed=True, reason=decision.reason)
        where = {name: i for i, name in enumerate(self._names[p] for p in pods)}
        d = where[decision.chosen]
        p = where[decision.prefill] if decision.prefill is not None else d
        pred_ok = self._pred is not None and not decision.fallback
        uncached = round(req.prompt * (1.0 - prefix[p]))
        self._ledger.record(self._names[pods[p]], self._names[pods[d]], uncached, v.now)
        return Route(
            pods[d],
            prefill=pods[p] if decision.prefill is not None else None,
            uncached=uncached,
            ttft_ms=float(self._pred[0][p]) if pred_ok and self._pred else math.nan,
            tpot_ms=float(self._pred[1][d]) if pred_ok and self._pred else math.nan,
            tpot_p90_ms=float(self._pred[2][d]) if pred_ok and self._pred else math.nan,
            ttft_row=rows[p],
            tpot_row=rows[d],
        )

    def on_dispatch(self, req: Request, route: Route, now: float) -> None:
        if self._index is not None:
            self._index.add(route.pod, req.units)
            if route.prefill is not None:
                self._index.add(route.prefill, req.units)

    def _sample(self, target: Literal["ttft", "tpot"], route: Route, now: float, ms: float) -> None:
        row = route.ttft_row if target == "ttft" else route.tpot_row
        if row is None:
            return
        pod = route.prefill if target == "ttft" and route.prefill is not None else route.pod
        predicted = route.ttft_ms if target == "ttft" else route.tpot_ms
        # The prediction rides with the sample, as the EPP's ``predicted_*_ms`` does.
        self.predictors[self._class_of[pod]].add(target, row, ms, predicted_ms=predicted)
        if math.isfinite(predicted) and ms > 0:
            self._live[target].setdefault(int(now // LIVE_BIN_S), []).append(
                abs(predicted - ms) / ms
            )

    def on_first_token(self, req: Request, route: Route, now: float, ttft_ms: float) -> None:
        if route.prefill is None or self.config.pd_ttft_label == "client":
            self._sample("ttft", route, now, ttft_ms)

    def on_handoff(self, req: Request, route: Route, now: float, prefill_ms: float) -> None:
        if self.config.pd_ttft_label == "prefill":
            self._sample("ttft", route, now, prefill_ms)

    def on_transfer(self, kv_bytes: int, distance: Distance, ms: float) -> None:
        if self.config.learn_transfer:
            self.transfer.observe(kv_bytes, distance, ms)

    def on_done(self, req: Request, route: Route, now: float, tpot_ms: float | None) -> None:
        if tpot_ms is not None and self.config.train_tpot:
            self._sample("tpot", route, now, tpot_ms)

    def tick(self, now: float) -> None:
        for predictor in self.predictors.values():
            predictor.retrain(now)

    def summary(self) -> dict[str, Any]:
        live = {
            target: [
                {"time_s": b * LIVE_BIN_S, "mape": round(float(np.mean(v)), 4), "n": len(v)}
                for b, v in sorted(bins.items())
            ]
            for target, bins in self._live.items()
        }
        return {
            "decisions": self.decisions,
            "fallback_decisions": self.fallbacks,
            "shed_by_admitter": self.shed,
            "predictor": self._predictor_summary(),
            "live_mape": live,
            "scheduling_policy": self.config.policy.to_dict(),
            "prefix_index": self.config.prefix,
        }

    def _predictor_summary(self) -> dict[str, Any]:
        parts = {key or "pool": p.summary() for key, p in self.predictors.items()}
        if len(parts) == 1:
            return next(iter(parts.values()))
        first = next(iter(parts.values()))
        return {
            "kind": first["kind"],
            "per_class": True,
            "fits": sum(p["fits"] for p in parts.values()),
            "activated": sum(p["activated"] for p in parts.values()),
            "fit_seconds_total": round(sum(p["fit_seconds_total"] for p in parts.values()), 3),
            "window_rows": {
                t: sum(p["window_rows"][t] for p in parts.values()) for t in ("ttft", "tpot")
            },
            "classes": parts,
        }
