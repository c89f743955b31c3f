from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class ModelVersionRead(BaseModel):
    id: int
    pool: str
    target: str
    kind: str
    objective: str
    quantile: float
    status: str = Field(description="active, retired (was active) or rejected (by the gate)")
    gate_reason: str
    metrics: dict[str, Any] = Field(
        description="On the held-out rows: mape, mae, rmse, p90_ape, median_bias (fractions "
        "for relative figures), n; coverage and quantile_loss for quantile models."
    )
    n_train: int
    n_test: int
    train_seconds: float
    artifact_bytes: int
    training_started_at: datetime
    created_at: datetime
    activated_at: datetime | None
    live_high_load_bias: float | None = Field(
        None,
        description="Median (predicted - actual) / actual of this version's live predictions "
        "(the predicted_*_ms samples carry) in the top decile of load (running + waiting); "
        "negative is optimistic. Null without enough rows at high load.",
    )
    live_high_load_n: int = Field(0, description="Rows behind live_high_load_bias.")


class ModelVersionDetail(ModelVersionRead):
    feature_importance: dict[str, float]
    coefficients: dict[str, float] | None = Field(
        description="The hybrid model's physics base: ms per unit of each cost driver."
    )
