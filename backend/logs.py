"""Structured (JSON) logs carrying the request id, and the middleware that assigns it."""

from __future__ import annotations

import contextvars
import json
import logging
import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.errors import server_error_response
from backend.telemetry import Telemetry

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")

_STANDARD = set(vars(logging.makeLogRecord({})))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: easy to ship, easy to grep; extra={...} fields included."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            # Set on the record by the access log; from the request's context otherwise.
            "request_id": getattr(record, "request_id", request_id.get()),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure(level: str) -> None:
    formatter = JsonFormatter()
    formatter.converter = time.gmtime
    handler = logging.StreamHandler()
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Our access line below replaces uvicorn's (which has no request id and is not JSON).
    logging.getLogger("uvicorn.access").disabled = True
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


access = logging.getLogger("headroom.access")
unhandled = logging.getLogger("headroom.errors")


class RequestContext:
    """Assigns a request id (the caller's `x-request-id`, else a new one), echoes it, times the
    request per route template for Prometheus, and writes one access log line."""

    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers", ())).get(b"x-request-id", b"").decode("latin-1")
        rid = incoming[:128] or uuid.uuid4().hex
        token = request_id.set(rid)
        status = 500
        started = time.perf_counter()
        responded = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status = message["status"]
                responded = True
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            # A bug, answered here rather than by the server: the 500 keeps the request id (to
            # find the logged traceback) and the connection stays open (uvicorn closes a
            # keep-alive connection when the application raises).
            unhandled.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if not responded:
                await server_error_response()(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            path = getattr(route, "path", "unmatched")
            self.telemetry.requests.labels(scope["method"], path, str(status)).observe(elapsed)
            if access.isEnabledFor(logging.INFO):
                access.info(
                    "%s %s %s",
                    scope["method"],
                    scope["path"],
                    status,
                    extra={
                        "request_id": rid,
                        "route": path,
                        "status": status,
                        "ms": round(elapsed * 1000, 3),
                    },
                )
            request_id.reset(token)
