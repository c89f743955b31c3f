"""One JSON error shape: ``{"detail": "<what was wrong>", "errors": [...]}``.

``detail`` stays a field of every error body because the upstream Go client and FastAPI clients
read it; for validation errors it names the row index and field of the first problem, and
``errors`` lists them all.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.exceptions import AppError, Conflict, Invalid

if TYPE_CHECKING:
    # Only a type here: importing the telemetry at run time would load the model code
    # (XGBoost, scipy) into every process that reports an error, the ingest helpers included.
    from backend.telemetry import Telemetry

log = logging.getLogger("headroom.errors")

_SECTIONS = {"body", "query", "path", "header", "cookie"}


def describe_loc(loc: tuple[Any, ...] | list[Any]) -> tuple[int | None, str]:
    """('body', 'entries', 3, 'kv_cache_percentage') -> (3, 'entries[3].kv_cache_percentage')."""
    parts = list(loc[1:]) if loc and loc[0] in _SECTIONS else list(loc)
    index = next((p for p in parts if isinstance(p, int)), None)
    path = ""
    for p in parts:
        if isinstance(p, int):
            path += f"[{p}]"
        else:
            path += f".{p}" if path else str(p)
    return index, path or "body"


def validation_errors(raw: list[Any]) -> list[dict[str, Any]]:
    out = []
    for err in raw:
        loc = tuple(err.get("loc", ()))
        index, field = describe_loc(loc)
        leaf = next((str(p) for p in reversed(loc) if isinstance(p, str)), field)
        out.append(
            {"index": index, "field": leaf, "path": field, "message": err.get("msg", "invalid")}
        )
    return out


INGEST_SUFFIXES = ("/add_training_data_bulk", "/v1/samples")


def _count_rejected(request: Request, reason: str) -> None:
    if request.url.path.endswith(INGEST_SUFFIXES):
        request.app.state.telemetry.rejected.labels(reason).inc()


async def _on_validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    _count_rejected(request, "invalid")
    errors = validation_errors(list(exc.errors()))
    first = errors[0] if errors else {"path": "body", "message": "invalid request"}
    return JSONResponse(
        status_code=422,
        content={"detail": f"{first['path']}: {first['message']}", "errors": errors},
    )


async def _on_database_error(request: Request, exc: Exception) -> JSONResponse:
    _count_rejected(request, "database_unavailable")
    # The database being unreachable is not the caller's fault and not a bug: 503 tells
    # clients (and the EPP) to retry, and nothing of the request was stored.
    log.warning("database unavailable: %s", type(exc).__name__)
    return JSONResponse(
        status_code=503,
        content={"detail": "database unavailable; nothing was stored, retry later"},
        headers={"Retry-After": "1"},
    )


def app_error_body(exc: AppError) -> dict[str, Any]:
    """An AppError in the one error shape: a 409 about a versioned record carries its current
    version, an invalid field is listed like a validation error."""
    body: dict[str, Any] = {"detail": exc.detail}
    if isinstance(exc, Conflict) and exc.current_version is not None:
        body["current_version"] = exc.current_version
    if isinstance(exc, Invalid) and exc.field is not None:
        body["errors"] = [
            {"index": None, "field": exc.field, "path": exc.field, "message": exc.detail}
        ]
    return body


async def _on_app_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AppError)
    return JSONResponse(status_code=exc.status_code, content=app_error_body(exc))


def server_error_response() -> JSONResponse:
    """The answer to a bug: the one error shape, without internals (they go to the log)."""
    return JSONResponse(status_code=500, content={"detail": "internal error; it has been logged"})


M = TypeVar("M", bound=BaseModel)


def validate_body(model: type[M], data: Any, *, json: bool = False) -> M:
    """Validate a body a route took raw, raising FastAPI's own error so that the 422 has the
    same shape as everywhere else."""
    try:
        return model.model_validate_json(data) if json else model.model_validate(data)
    except ValidationError as exc:
        raise as_request_error(exc) from None


def as_request_error(exc: ValidationError) -> RequestValidationError:
    """A pydantic error about a request body, as FastAPI's own 422."""
    return body_errors(exc.errors(include_url=False))


def body_errors(errors: Iterable[Mapping[str, Any]]) -> RequestValidationError:
    """pydantic's error entries about a request body (locations relative to it) as FastAPI's
    own 422."""
    return RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors])


class StorageUnavailable(RuntimeError):
    """The database, or the helper process that writes to it, cannot take a batch now."""


class ErrorBody(BaseModel):
    """Every error answer: `detail` says what was wrong (upstream's clients read it); for
    invalid input `errors` lists each problem with the row index and field."""

    detail: str
    errors: list[dict[str, Any]] | None = None
    current_version: int | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "The body could not be read (e.g. not UTF-8)."),
        (401, "A bearer token is required or invalid."),
        (403, "The token's role or scopes do not allow this."),
        (404, "Unknown pool or record."),
        (409, "Already exists, or changed since `base_version` (see `current_version`)."),
        (413, "Request body too large."),
        (422, "Invalid input; nothing of it was stored."),
        (503, "Not ready (no model yet) or the database is unavailable."),
    )
}


RATE_LIMITED: dict[int | str, dict[str, Any]] = {
    429: {
        "model": ErrorBody,
        "description": "Over the client address's ingestion rate limit "
        "(`HEADROOM_INGEST__CLIENT_BYTES_PER_S`); nothing of it was stored. Retry after "
        "`Retry-After` seconds.",
        "headers": {
            "Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}
        },
    }
}
"""The ingestion routes' extra answer (``samples.router.ingest_request``)."""


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(AppError, _on_app_error)
    app.add_exception_handler(OperationalError, _on_database_error)
    app.add_exception_handler(InterfaceError, _on_database_error)
    app.add_exception_handler(StorageUnavailable, _on_database_error)


class _BodyTooLarge(HTTPException):
    # An HTTPException, because FastAPI re-raises those from body parsing instead of
    # turning them into a generic 400.
    def __init__(self) -> None:
        super().__init__(status_code=413)


_CLOSE = {"connection": "close"}


class _BodyTooSlow(HTTPException):
    # "Connection: close" makes uvicorn drop the connection after the answer: the rest of a
    # stalled body is never read, and the socket is not held for keep-alive either.
    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"request body not received within {seconds:g} s", dict(_CLOSE))


class BodySizeLimit:
    """Refuses bodies over `limit` bytes with 413, by header or while streaming (chunked), and
    bodies not received within `read_timeout_s` of the request's start with 408.

    uvicorn's `timeout_keep_alive` only covers the time between requests: without the
    deadline, a client that sends headers and then stalls mid-body holds its connection, and
    the request's memory, for as long as it likes.
    """

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        telemetry: Telemetry | None = None,
        read_timeout_s: float = 30.0,
    ) -> None:
        self.app = app
        self.limit = limit
        self.telemetry = telemetry
        self.read_timeout_s = read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                await self._refuse(send, int(value))
                return
        received = 0
        started = False
        deadline = asyncio.get_running_loop().time() + self.read_timeout_s

        body_done = False

        async def limited_receive() -> Message:
            nonlocal received, body_done
            if body_done:  # later reads wait for a disconnect (streaming answers): no deadline
                return await receive()
            try:
                # One timer per read (a few microseconds), cancelled as soon as data is there.
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _BodyTooSlow(self.read_timeout_s) from None
            if message["type"] == "http.request":
                body_done = not message.get("more_body", False)
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _BodyTooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await self._refuse(send, received)
        except _BodyTooSlow as exc:
            if not started:
                response = JSONResponse(
                    status_code=408, content={"detail": exc.detail}, headers=dict(_CLOSE)
                )
                await response({"type": "http"}, _empty_receive, send)

    async def _refuse(self, send: Send, size: int) -> None:
        if self.telemetry is not None:
            self.telemetry.rejected.labels("too_large").inc()
        response = JSONResponse(
            status_code=413,
            content={"detail": f"request body too large: {size} bytes > limit {self.limit}"},
        )
        await response({"type": "http"}, _empty_receive, send)


async def _empty_receive() -> Message:
    return {"type": "http.disconnect"}
