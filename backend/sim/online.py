"""The online predictor inside a simulation: the service's window, training round and gate.

The same code as the service (``docs/design.md``), held in memory: samples are bucketed by
``WindowSpec`` (KV utilisation, prefix score, queue band) and pod class, each bucket keeps its
newest ``cap`` samples, about ``test_fraction`` of samples are held out at arrival; every retrain
interval each target with new samples runs ``backend.predictor.gate.train_round`` (first model
after ``min_samples`` samples): the promotion gate and the flood rule the service's trainer runs,
on simulated time.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import xgboost as xgb

from backend.predictor import gate
from backend.predictor.calibration import Calibration, column_load, meet_probability
from backend.predictor.features import PROGRESS_FIELDS, Target
from backend.predictor.regressors import Kind, LatencyModel, TrainParams, default_params
from backend.predictor.rows import WindowRows
from backend.predictor.training import serve_columns
from backend.predictor.window import WindowSpec
from backend.settings import TrainingSettings, WindowSettings

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
    *PROGRESS_FIELDS,
)
"""Wire fields of a sample row, in this order (``pod_type`` as the predictor's integer code)."""
TARGETS: Final[tuple[Target, ...]] = ("ttft", "tpot")

# (row, label ms, held out, arrival number, pod class, the mean the router was served: NaN if none)
Sample = tuple[tuple[float, ...], float, bool, int, str | None, float]


@dataclass(frozen=True, slots=True)
class FitRecord:
    time_s: float
    target: str
    n_train: int
    n_test: int
    mape: float | None  # candidate, held-out rows
    activated: bool
    reason: str
    fit_s: float


def columns(rows: npt.NDArray[np.float64]) -> dict[str, npt.NDArray[np.float64]]:
    """``(n, len(FIELDS))`` rows as the predictor's column mapping."""
    return {name: rows[:, j] for j, name in enumerate(FIELDS)}


class OnlinePredictor:
    SERVED_BY_KEPT: Final = 1000

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
        drift: bool = True,
        live_calibration: bool = True,
    ) -> None:
        settings = WindowSettings()
        training = TrainingSettings()
        self.kind: Kind = kind
        self.params = params
        self.spec = spec or WindowSpec.from_settings(settings)
        self.test_fraction = settings.test_fraction if test_fraction is None else test_fraction
        self.min_samples = min_samples
        self.rules = dataclasses.replace(
            gate.GateRules.from_settings(training), tolerance=gate_tolerance
        )
        if not drift:
            # The service's gate runs the drift rules (rule 4), and so does the simulator by
            # default. Figures published before they were made robust to routed traffic's
            # usual live error were measured without them: ``drift=False`` runs the gate so.
            self.rules = dataclasses.replace(
                self.rules, drift_factor=float("inf"), high_load_bias_limit=None
            )
        self.shift_rules = gate.ShiftRules.from_settings(training)
        self._rng = random.Random(seed)
        # Off: the rows carry no prediction into the round, so the calibration comes from the
        # held-out rows and the mean is served as the model predicts (as before issue 17's live
        # calibration; the llm-d baselines, whose predictor has none).
        self.live_calibration = live_calibration
        self._windows: dict[Target, dict[tuple[int, str | None], deque[Sample]]] = {
            t: {} for t in TARGETS
        }
        self._new: dict[Target, int] = dict.fromkeys(TARGETS, 0)
        self._arrivals = 0
        self._trained_through: dict[Target, int] = dict.fromkeys(TARGETS, 0)
        self._shift: dict[Target, gate.Shift] = {t: gate.Shift(None) for t in TARGETS}
        self._active: dict[Target, gate.Active | None] = dict.fromkeys(TARGETS, None)
        # Per target, every activation: (newest row id then, its calibration), oldest first: which
        # correction each sample's prediction was served with (``gate.served_factors``).
        self._served_by: dict[Target, list[tuple[int, Calibration | None]]] = {
            t: [] for t in TARGETS
        }
        self.models: dict[Target, LatencyModel | None] = dict.fromkeys(TARGETS, None)
        self.history: list[FitRecord] = []
        self.failures = 0

    def add(
        self,
        target: Target,
        row: tuple[float, ...],
        label_ms: float,
        pod_class: str | None = None,
        predicted_ms: float = float("nan"),
    ) -> None:
        """One observed latency, with the mean the router was served for it (NaN: none, e.g.
        routed by the fallback); buckets are per pod class, as the service's window trims them
        (a busy GPU type cannot push a rare one out)."""
        if not label_ms > 0:
            return
        key = (self.spec.bucket(row[0], row[4], int(row[2])), pod_class)
        window = self._windows[target]
        dq = window.get(key)
        if dq is None:
            dq = window[key] = deque(maxlen=self.spec.cap)
        self._arrivals += 1
        test = self._rng.random() < self.test_fraction
        dq.append((row, label_ms, test, self._arrivals, pod_class, predicted_ms))
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
        cols: dict[str, npt.NDArray[Any]] = dict(
            columns(np.asarray([s[0] for s in samples], dtype=np.float64))
        )
        cols["pod_class"] = np.asarray([s[4] for s in samples], dtype=object)
        ids = np.asarray([s[3] for s in samples], dtype=np.int64)
        live = self.live_calibration
        rows = WindowRows(
            cols,
            np.asarray([s[1] for s in samples], dtype=np.float64),
            np.asarray([s[2] for s in samples], dtype=np.bool_),
            ids,
            np.asarray([s[5] for s in samples], dtype=np.float64) if live else None,
            # As the service's trainer: TTFT rows are attributed to the version that routed
            # them by arrival order; TPOT rows arrive versions later (backend/registry/trainer.py).
            gate.served_factors(ids, column_load(cols), self._served_by[target])
            if live and target == "ttft"
            else None,
        )
        # The trainer passes its thread count to the booster but not to the QuantileDMatrix it
        # builds first, which then takes every core: on a shared 2-core machine its OpenMP start
        # costs 30-60 ms a fit instead of 5-10. The global default makes both honour it.
        threads = (self.params or default_params(self.kind)).nthread
        try:
            with xgb.config_context(nthread=threads):
                rnd = gate.train_round(
                    target,
                    rows,
                    self._active[target],
                    self._trained_through[target],
                    self._shift[target],
                    now,
                    self.rules,
                    self.shift_rules,
                    kind=self.kind,
                    objective="mean",
                    quantile=0.9,
                    params=self.params,
                )
        except ValueError:
            # e.g. every sample so far held out; the service stores nothing in that case either.
            self.failures += 1
            return
        result, decision = rnd.result, rnd.decision
        self._trained_through[target] = int(ids.max())
        self._shift[target] = rnd.shift
        mape = result.metrics.mape if result.metrics is not None else None
        if decision.activate:
            self.models[target] = result.model
            self._active[target] = gate.Active(result.model, int(ids.max()), mape, rnd.from_id)
            self._served_by[target].append((int(ids.max()), result.model.calibration))
            # Only the versions that can have served a row still in the window are needed.
            del self._served_by[target][: -self.SERVED_BY_KEPT]
        self.history.append(
            FitRecord(
                now,
                target,
                result.n_train,
                result.n_test,
                mape,
                decision.activate,
                decision.reason,
                result.train_seconds,
            )
        )

    def predict(
        self, cols: dict[str, npt.NDArray[np.float64]]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(TTFT, TPOT) served means in ms, as the service serves them (``serve_columns``).
        Raises without a TTFT model; TPOT is 0 until a TPOT model exists, as the service answers
        for a pool that has sent no TPOT samples yet."""
        ttft_model, tpot_model = self.models["ttft"], self.models["tpot"]
        if ttft_model is None:
            raise LookupError("no TTFT model yet")
        ttft = serve_columns(ttft_model, "ttft", cols)
        if tpot_model is None:
            return ttft, np.zeros_like(ttft)
        return ttft, serve_columns(tpot_model, "tpot", cols)

    def tpot_model(self) -> LatencyModel | None:
        return self.models["tpot"]

    def ttft_model(self) -> LatencyModel | None:
        return self.models["ttft"]

    def tpot_p90(
        self, cols: dict[str, npt.NDArray[np.float64]], tpot: npt.NDArray[np.float64]
    ) -> npt.NDArray[np.float64]:
        """The calibrated TPOT p90 for rows whose mean is ``tpot``; NaN without a calibration."""
        model = self.tpot_model()
        if model is None or model.calibration is None:
            return np.full(len(tpot), np.nan)
        return tpot * model.calibration.upper(column_load(cols))

    def meet_probability(
        self,
        cols: dict[str, npt.NDArray[np.float64]],
        ttft: npt.NDArray[np.float64],
        tpot: npt.NDArray[np.float64],
        ttft_slo_ms: float | None,
        tpot_slo_ms: float | None,
    ) -> npt.NDArray[np.float64]:
        """P(meeting both SLOs) for rows whose served means are ``ttft`` and ``tpot``."""
        ttft_model, tpot_model = self.ttft_model(), self.tpot_model()
        return meet_probability(
            column_load(cols),
            ttft,
            tpot,
            ttft_slo_ms,
            tpot_slo_ms,
            ttft_model.calibration if ttft_model is not None else None,
            tpot_model.calibration if tpot_model is not None else None,
        )

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
