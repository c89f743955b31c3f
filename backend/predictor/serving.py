"""The models an API process serves, held in memory. No database, no locks on the read path.

A refresh builds a new mapping and swaps the reference in one assignment, so a prediction
sees either the old models or the new ones, never a mix being built.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from backend.predictor.calibration import column_load, meet_probability
from backend.predictor.features import Target
from backend.predictor.regressors import LatencyModel
from backend.predictor.training import predict_columns, serve_columns

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ServedModel:
    version_id: int
    model: LatencyModel
    kind: str
    objective: str
    quantile: float
    activated_at: datetime
    loaded_at: datetime
    metrics: Mapping[str, Any] = field(default_factory=dict)  # held-out, from the registry

    def predict(self, target: Target, cols: Mapping[str, npt.NDArray[Any]]) -> npt.NDArray[Any]:
        """The served mean: the model corrected by its calibration (``serve_columns``)."""
        return serve_columns(self.model, target, cols)


class ModelStore:
    def __init__(self) -> None:
        self._models: dict[tuple[str, Target], ServedModel] = {}

    def get(self, pool: str, target: Target) -> ServedModel | None:
        return self._models.get((pool, target))

    def snapshot(self) -> dict[tuple[str, Target], ServedModel]:
        return dict(self._models)

    def replace(self, models: dict[tuple[str, Target], ServedModel]) -> None:
        self._models = models

    def pools(self) -> set[str]:
        return {pool for pool, _ in self._models}


@dataclass(frozen=True)
class Predictions:
    ttft_ms: npt.NDArray[np.float64]
    tpot_ms: npt.NDArray[np.float64]
    ttft: ServedModel
    tpot: ServedModel | None
    tpot_p90_ms: npt.NDArray[np.float64] | None = None
    """The TPOT model's calibrated p90 per row; None when the active version has none."""
    ttft_p90_ms: npt.NDArray[np.float64] | None = None
    """The TTFT model's calibrated p90 per row; None when the active version has none."""

    @property
    def last_model_load(self) -> datetime:
        loads = [self.ttft.loaded_at] + ([self.tpot.loaded_at] if self.tpot else [])
        return max(loads)


class ModelsNotReady(LookupError):
    pass


def predict_both(store: ModelStore, pool: str, cols: Mapping[str, npt.NDArray[Any]]) -> Predictions:
    """TTFT and TPOT for every row. TTFT is required; without a TPOT model (routing-only pools,
    which never send TPOT samples) TPOT is 0, which is what upstream's routing-only mode reads."""
    ttft = store.get(pool, "ttft")
    if ttft is None:
        raise ModelsNotReady(pool)
    tpot = store.get(pool, "tpot")
    n = int(np.shape(cols["input_token_length"])[0])
    load = column_load(cols)
    ttft_ms, ttft_p90 = _served(ttft.model, "ttft", cols, load)
    if tpot is None:
        return Predictions(ttft_ms, np.zeros(n), ttft, None, None, ttft_p90)
    tpot_ms, p90 = _served(tpot.model, "tpot", cols, load)
    return Predictions(ttft_ms, tpot_ms, ttft, tpot, p90, ttft_p90)


def _served(
    model: LatencyModel, target: Target, cols: Mapping[str, npt.NDArray[Any]], load: FloatArray
) -> tuple[FloatArray, FloatArray | None]:
    """The served mean (``serve_columns``) and the calibrated p90 beside it (None without a
    calibration): one pass over the trees, one banding of the rows."""
    raw = np.asarray(predict_columns(model, target, cols), dtype=np.float64)
    if model.calibration is None:
        return raw, None
    mean_factor, upper = model.calibration.at(load)
    mean = raw * mean_factor
    return mean, mean * upper


def meet_both(
    store: ModelStore,
    pool: str,
    cols: Mapping[str, npt.NDArray[Any]],
    ttft_ms: npt.ArrayLike,
    tpot_ms: npt.ArrayLike,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
) -> npt.NDArray[np.float64]:
    """P(meeting both SLOs) per row whose served means are given, by the active versions'
    residual spread (``calibration.meet_probability``; the simulator's probe runs the same)."""
    ttft, tpot = store.get(pool, "ttft"), store.get(pool, "tpot")
    return meet_probability(
        column_load(cols),
        ttft_ms,
        tpot_ms,
        ttft_slo_ms,
        tpot_slo_ms,
        ttft.model.calibration if ttft is not None else None,
        tpot.model.calibration if tpot is not None else None,
    )
