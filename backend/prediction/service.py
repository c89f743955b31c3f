"""Hot-path helpers: parse a body straight from bytes, predict from memory. No database."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from backend.deps import Runtime
from backend.errors import validate_body
from backend.prediction.schemas import columns
from backend.predictor.serving import ModelStore, Predictions, predict_both
from backend.samples.schemas import Features

M = TypeVar("M", bound=BaseModel)


async def parse_body(request: Request, model: type[M]) -> M:
    """Validate the raw body with pydantic's JSON parser (faster than json.loads + validate)."""
    return validate_body(model, await request.body(), json=True)


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """Document a body that a route parses itself (see parse_body); nested models inlined, as
    an operation's schema cannot point into pydantic's `$defs`."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return inline(defs[ref.removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items()}
        if isinstance(node, list):
            return [inline(v) for v in node]
        return node

    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline(schema)}},
        }
    }


def predict_rows(store: ModelStore, pool: str, rows: list[Features]) -> Predictions:
    return predict_both(store, pool, columns(rows))


def ensure_known(runtime: Runtime, pool: str) -> None:
    """Raise PoolNotFound (a 404) for a pool that does not exist: "no model yet" (503) is only
    for real pools. From memory once the pool has been seen."""
    if not _seen(runtime, pool):
        with runtime.sessions() as session:
            runtime.pools.resolve(session, pool)


async def ensure_known_async(runtime: Runtime, pool: str) -> None:
    """`ensure_known` for async routes: the database read (a pool never seen) off the loop."""
    if not _seen(runtime, pool):
        await run_in_threadpool(ensure_known, runtime, pool)


def _seen(runtime: Runtime, pool: str) -> bool:
    return pool in runtime.store.pools() or runtime.pools.cached(pool) is not None
