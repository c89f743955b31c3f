"""The console: a FastAPI sub-application mounted at `/ui` by `backend.app.create_app`.

A sub-application of its own, so that the session cookie, the CSRF check, the HTML error pages
and the security headers apply to the console only: the data plane (`/predict`, ingestion)
pays nothing for them, and the API's OpenAPI schema does not list HTML pages.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request
from starlette.middleware.sessions import SessionMiddleware
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from backend.auth.sessions import COOKIE_NAME, session_secret
from backend.demo.feeder import DemoFeeder
from backend.deps import Runtime
from backend.settings import Settings
from backend.ui.deps import ConsoleState, csrf_protect
from backend.ui.errors import install_error_pages
from backend.ui.routes import (
    account,
    admin,
    advisor,
    models,
    objectives,
    overview,
    policies,
    samples,
    signin,
    whatif,
)
from backend.ui.templating import Renderer, frontend_dir, make_templates
from backend.whatif.runner import make_runner

log = logging.getLogger("headroom.ui")

PREFIX = "/ui"

# The console's pages and forms, in the order their routes are matched.
ROUTE_MODULES = (
    signin,
    overview,
    models,
    samples,
    policies,
    advisor,
    objectives,
    whatif,
    admin,
    account,
)

# No inline scripts anywhere (chart data travels in application/json blocks), so scripts may
# only come from our own static files; nothing may frame the console (clickjacking).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; "
    "base-uri 'self'; object-src 'none'"
)


class Console:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        if settings.ui.demo and not settings.embedded:
            # Every replica would feed its own copy of the simulated traffic.
            raise RuntimeError("demo mode feeds the embedded mode; unset HEADROOM_REDIS_URL")
        # Raises InsecureSecret at start-up when production mode has no proper key.
        secret = session_secret(settings)
        self.state = ConsoleState(settings, Renderer(make_templates(settings)))
        self.demo: DemoFeeder | None = None
        app = FastAPI(
            title="Headroom console",
            openapi_url=None,
            docs_url=None,
            redoc_url=None,
            dependencies=[Depends(csrf_protect)],
        )
        app.state.console = self.state

        @app.middleware("http")
        async def security_headers(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            response = await call_next(request)
            if response.headers.get("content-type", "").startswith("text/html"):
                response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
                response.headers["X-Frame-Options"] = "DENY"
                # Pages can show a token once, and always show one user's view: never cache.
                response.headers["Cache-Control"] = "no-store"
            response.headers["X-Content-Type-Options"] = "nosniff"
            response.headers["Referrer-Policy"] = "same-origin"
            return response

        # Added last, so it runs first: the session exists for every handler and error page.
        app.add_middleware(
            SessionMiddleware,
            secret_key=secret,
            session_cookie=COOKIE_NAME,
            max_age=settings.ui.session_max_age_s,
            path=PREFIX,
            same_site="lax",
            https_only=settings.ui.secure_cookies,
        )
        app.mount("/static", StaticFiles(directory=frontend_dir(settings) / "static"), "static")
        for module in ROUTE_MODULES:
            app.include_router(module.router)
        install_error_pages(app, self.state.renderer)
        self.app = app

    def start(self, runtime: Runtime) -> None:
        self.app.state.runtime = runtime
        self.state.whatif = make_runner(runtime.settings)
        self.state.advisor = runtime.advisor
        if self.settings.ui.demo:
            self.demo = DemoFeeder(runtime).start()
            self.state.knowable = self.demo.knowable

    def stop(self) -> None:
        if self.demo is not None:
            self.demo.stop()
        if self.state.whatif is not None:
            self.state.whatif.stop()
