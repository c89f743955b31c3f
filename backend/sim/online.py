"""The online predictor inside a simulation: the service's window, trainer and quality gate.

Same semantics as the service (``docs/design.md``), held in memory: samples are bucketed by
``WindowSpec`` (KV utilisation, prefix score, queue band), each bucket keeps its newest ``cap``
samples, about ``test_fraction`` of samples are held out at arrival; every retrain interval each
target with new samples is fitted by ``backend.predictor.training.train_target`` (first model
after ``min_samples`` samples) and activated unless it scores worse than the active model on the
current held-out rows by more than ``gate_tolerance``.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import xgboost as xgb

from backend.predictor.evaluation import evaluate
from backend.predictor.features import Target, feature_matrix
from backend.predictor.regressors import Kind, LatencyModel, TrainParams, default_params
from backend.predictor.training import train_target
from backend.samples.window import WindowSpec
from backend.settings import WindowSettings

FIELDS: Final = (
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefix_cache_score",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
    "num_tokens_generated",
    "pod_type",
)
"""Wire fields of a sample row, in this order (``pod_type`` as the predictor's integer code)."""
TARGETS: Final[tuple[Target, ...]] = ("ttft", "tpot")

Sample = tuple[tuple[float, ...], float, bool]  # (row, label ms, held out)


@dataclass(frozen=True, slots=True)
class FitRecord:
    time_s: float
    target: str
    n_train: int
    n_test: int
    mape: float | None  # candidate, held-out rows
    active_mape: float | None  # the model it replaced, same rows
    activated: bool
    fit_s: float


def columns(rows: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.float64]]:
    """``(n, len(FIELDS))`` rows as the predictor's column mapping."""
    return {name: rows[:, j] for j, name in enumerate(FIELDS)}


class OnlinePredictor:
    def __init__(
        self,
        *,
        kind: Kind = "hybrid",
        params: TrainParams | None = None,
        spec: WindowSpec | None = None,
        test_fraction: float | None = None,
        min_samples: int = 10,
        gate_tolerance: float = 0.1,
        seed: int = 0,
    ) -> None:
        settings = WindowSettings()
        self.kind: Kind = kind
        self.params = params
        self.spec = spec or WindowSpec.from_settings(settings)
        self.test_fraction = settings.test_fraction if test_fraction is None else test_fraction
        self.min_samples = min_samples
        self.gate_tolerance = gate_tolerance
        self._rng = random.Random(seed)
        self._windows: dict[Target, dict[int, deque[Sample]]] = {t: {} for t in TARGETS}
        self._new: dict[Target, int] = dict.fromkeys(TARGETS, 0)
        self.models: dict[Target, LatencyModel | None] = dict.fromkeys(TARGETS, None)
        self.history: list[FitRecord] = []
        self.failures = 0

    def add(self, target: Target, row: tuple[float, ...], label_ms: float) -> None:
        if not label_ms > 0:
            return
        bucket = self.spec.bucket(row[0], row[4], int(row[2]))
        window = self._windows[target]
        dq = window.get(bucket)
        if dq is None:
            dq = window[bucket] = deque(maxlen=self.spec.cap)
        dq.append((row, label_ms, self._rng.random() < self.test_fraction))
        self._new[target] += 1

    def size(self, target: Target) -> int:
        return sum(len(dq) for dq in self._windows[target].values())

    def ready(self) -> bool:
        return self.models["ttft"] is not None

    def retrain(self, now: float) -> None:
        for target in TARGETS:
            if self._new[target] == 0 or self.size(target) < self.min_samples:
                continue
            self._new[target] = 0
            self._fit(target, now)

    def _fit(self, target: Target, now: float) -> None:
        samples = [s for dq in self._windows[target].values() for s in dq]
        rows = np.asarray([s[0] for s in samples], dtype=np.float64)
        labels = np.asarray([s[1] for s in samples], dtype=np.float64)
        test = np.asarray([s[2] for s in samples], dtype=np.bool_)
        cols = columns(rows)
        # The trainer passes its thread count to the booster but not to the QuantileDMatrix it
        # builds first, which then takes every core: on a shared 2-core machine its OpenMP start
        # costs 30-60 ms a fit instead of 5-10. The global default makes both honour it.
        threads = (self.params or default_params(self.kind)).nthread
        try:
            with xgb.config_context(nthread=threads):
                result = train_target(
                    target, cols, labels, test, kind=self.kind, params=self.params
                )
        except ValueError:
            # e.g. every sample so far held out; the service stores nothing in that case either.
            self.failures += 1
            return
        mape = result.metrics.mape if result.metrics is not None else None
        active = self.models[target]
        active_mape = None
        activate = True
        if active is not None and mape is not None and result.n_test >= 10:
            held = {name: col[test] for name, col in cols.items()}
            active_mape = evaluate(labels[test], active.predict(feature_matrix(target, held))).mape
            activate = mape <= active_mape * (1.0 + self.gate_tolerance)
        if activate:
            self.models[target] = result.model
        self.history.append(
            FitRecord(
                now,
                target,
                result.n_train,
                result.n_test,
                mape,
                active_mape,
                activate,
                result.train_seconds,
            )
        )

    def predict(
        self, cols: dict[str, npt.NDArray[np.float64]]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(TTFT, TPOT) in ms. Raises without a TTFT model; TPOT is 0 until a TPOT model exists,
        as the service answers for a pool that has sent no TPOT samples yet."""
        ttft_model, tpot_model = self.models["ttft"], self.models["tpot"]
        if ttft_model is None:
            raise LookupError("no TTFT model yet")
        ttft = np.asarray(ttft_model.predict(feature_matrix("ttft", cols)), dtype=np.float64)
        if tpot_model is None:
            return ttft, np.zeros_like(ttft)
        tpot = np.asarray(tpot_model.predict(feature_matrix("tpot", cols)), dtype=np.float64)
        return ttft, tpot

    def summary(self) -> dict[str, Any]:
        fits = [r for r in self.history]
        return {
            "kind": self.kind,
            "fits": len(fits),
            "activated": sum(r.activated for r in fits),
            "fit_seconds_total": round(sum(r.fit_s for r in fits), 3),
            "window_rows": {t: self.size(t) for t in TARGETS},
            "held_out_mape": [
                {
                    "time_s": round(r.time_s, 1),
                    "target": r.target,
                    "mape": None if r.mape is None else round(r.mape, 4),
                    "n_train": r.n_train,
                    "activated": r.activated,
                }
                for r in fits
            ],
        }
