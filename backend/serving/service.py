"""Hot-path helpers: parse a body straight from bytes, predict from memory. No database."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel

from backend.errors import validate_body
from backend.predictor.serving import ModelStore, Predictions, predict_both
from backend.samples.schemas import Features
from backend.serving.schemas import columns

M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    """Validate the raw body with pydantic's JSON parser (faster than json.loads + validate)."""
    return validate_body(model, await request.body(), json=True)


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """Document a body that a route parses itself (see parse_body)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": model.model_json_schema()}},
        }
    }


def predict_rows(store: ModelStore, pool: str, rows: list[Features]) -> Predictions:
    return predict_both(store, pool, columns(rows))
