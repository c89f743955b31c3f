"""The console answers errors with HTML pages (the API keeps its JSON shape)."""

from __future__ import annotations

import logging
from http import HTTPStatus
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import RedirectResponse, Response

from backend.errors import validation_errors
from backend.exceptions import AppError
from backend.ui.deps import CsrfRejected, LoginRequired
from backend.ui.templating import Renderer

log = logging.getLogger("headroom.ui")


def _is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def install_error_pages(app: FastAPI, renderer: Renderer) -> None:
    def page(request: Request, status: int, detail: str) -> Response:
        title = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Error"
        return renderer.page(
            request,
            "error.html",
            {"status": status, "title": title, "detail": detail},
            actor=None,
            status_code=status,
        )

    async def login_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LoginRequired)
        root = request.scope.get("root_path", "")
        target = f"{root}/login?next={quote(exc.next_url, safe='/')}"
        if _is_htmx(request):
            # htmx would swap the sign-in page into a fragment; ask it to navigate instead.
            return Response(status_code=204, headers={"HX-Redirect": target})
        return RedirectResponse(target, status_code=303)

    async def csrf_rejected(request: Request, _: Exception) -> Response:
        return page(
            request,
            403,
            "The form's security token is missing or does not match your session (it expires "
            "when you sign out or in again). Nothing was changed: reload the page and retry.",
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
        return page(request, exc.status_code, detail)

    async def app_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AppError)
        return page(request, exc.status_code, exc.detail)

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = validation_errors(list(exc.errors()))
        detail = "; ".join(f"{e['path']}: {e['message']}" for e in errors) or "invalid request"
        return page(request, 422, detail)

    async def database_down(request: Request, exc: Exception) -> Response:
        log.warning("console: database unavailable (%s)", type(exc).__name__)
        return page(request, 503, "The database is not answering; retry in a moment.")

    async def server_error(request: Request, exc: Exception) -> Response:
        # Starlette logs the exception itself after this page is sent.
        return page(request, 500, "Something went wrong on our side; the error has been logged.")

    app.add_exception_handler(Exception, server_error)
    app.add_exception_handler(LoginRequired, login_required)
    app.add_exception_handler(CsrfRejected, csrf_rejected)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(AppError, app_error)
    app.add_exception_handler(RequestValidationError, bad_request)
    app.add_exception_handler(OperationalError, database_down)
    app.add_exception_handler(InterfaceError, database_down)
