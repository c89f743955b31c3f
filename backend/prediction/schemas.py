"""Prediction shapes: our `/v1` API and upstream's prediction server (same row fields)."""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from backend.predictor.features import POD_ROLE_CODES, pod_role_code
from backend.samples.models import WINDOW_FEATURES
from backend.samples.schemas import MAX_BULK_ROWS, Features

PredictionRequest = Features

# Wire fields handed to the feature builders as float64 columns (pod_type is a string here).
_NUMERIC_FIELDS = tuple(f for f in WINDOW_FEATURES if f != "pod_type")
_numeric_values = attrgetter(*_NUMERIC_FIELDS)


def columns(rows: list[Features]) -> dict[str, npt.NDArray[Any]]:
    """Rows -> columnar arrays (what the models take); pod_type as its integer code, pod_class
    as text (each model encodes it with its own vocabulary)."""
    n = len(rows)
    # One C-level getter per row and one conversion: a generator per field cost 0.3 ms per
    # 100 rows, a third of a bulk prediction.
    matrix = np.array([_numeric_values(r) for r in rows], dtype=np.float64)
    matrix = matrix.reshape(n, len(_NUMERIC_FIELDS))
    cols: dict[str, npt.NDArray[Any]] = {
        name: matrix[:, j] for j, name in enumerate(_NUMERIC_FIELDS)
    }
    # A dict hit for every llm-d role; only an unknown spelling pays for the normalisation.
    known = POD_ROLE_CODES.get
    cols["pod_type"] = np.fromiter(
        (
            code if (code := known(r.pod_type or "")) is not None else pod_role_code(r.pod_type)
            for r in rows
        ),
        dtype=np.float64,
        count=n,
    )
    cols["pod_class"] = np.array([r.pod_class for r in rows], dtype=object)
    return cols


class BulkPredictionRequest(BaseModel):
    """Upstream's body: `{"requests": [...]}` with 1..10,000 rows."""

    model_config = ConfigDict(extra="ignore")

    requests: list[PredictionRequest] = Field(min_length=1, max_length=MAX_BULK_ROWS)


class ModelRef(BaseModel):
    version_id: int
    kind: str
    objective: str
    quantile: float
    activated_at: datetime


class Prediction(BaseModel):
    ttft_ms: float = Field(
        description="The served mean: the model's prediction times its calibration's "
        "correction in the row's load band (the median of actual/predicted on the newest "
        "samples that carried a prediction; 1 while too few have)."
    )
    tpot_ms: float = Field(description="The served mean, corrected as ttft_ms.")
    tpot_p90_ms: float | None = Field(
        None,
        description="Calibrated 90th percentile of the TPOT (the mean times the 90th "
        "percentile of actual/mean in the row's load band, on the newest samples that carried "
        "a prediction, or on held-out rows while too few have); null when the active TPOT "
        "version has none (too few rows, or no TPOT model).",
    )
    ttft_p90_ms: float | None = Field(
        None, description="Calibrated 90th percentile of the TTFT, as tpot_p90_ms."
    )


class PredictResponse(Prediction):
    pool: str
    ttft_model: ModelRef
    tpot_model: ModelRef | None


class BulkPredictResponse(BaseModel):
    pool: str
    predictions: list[Prediction]
    ttft_model: ModelRef
    tpot_model: ModelRef | None
