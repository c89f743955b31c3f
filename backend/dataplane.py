"""The EPP's own listener: a second port that serves only what the EPP calls.

One application serves both ports (one process, one model store, one set of connections);
this middleware refuses on the data-plane port every path that is not an upstream route,
`/metrics` or a health route, so that a network rule can expose the console and `/v1` and the
token-less upstream routes to different clients.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from fastapi.responses import JSONResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send


class DataPlaneOnly:
    def __init__(self, app: ASGIApp, port: int, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        self.port = port
        self.patterns: tuple[re.Pattern[str], ...] = tuple(
            r.path_regex for r in routes if isinstance(r, Route)
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server")
        # The local port the connection came in on (uvicorn reports each socket's own).
        if scope["type"] in ("http", "websocket") and server and server[1] == self.port:
            path = scope["path"]
            if not any(p.match(path) for p in self.patterns):
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                detail = f"{path} is not served on the data-plane port"
                await JSONResponse({"detail": detail}, status_code=404)(scope, receive, send)
                return
        await self.app(scope, receive, send)
