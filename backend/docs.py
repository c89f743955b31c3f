"""The API's documentation pages (`/docs`, `/redoc`), served with a Content-Security-Policy and
frame options: they load their code from a CDN and run it with the page's origin, so what
they may load, where they may send data, and who may frame them is written down."""

from __future__ import annotations

import base64
import hashlib
import re

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse

CDN = "https://cdn.jsdelivr.net"
ICONS = "https://fastapi.tiangolo.com"
# Framing none: the pages carry "Try it out" forms, which a framing page could overlay.
_COMMON = (
    "default-src 'none'; connect-src 'self'; img-src 'self' data: " + ICONS + "; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)


def _inline_script_hashes(html: bytes) -> str:
    """CSP source expressions allowing exactly the page's own inline scripts, nothing else."""
    scripts = re.findall(rb"<script>(.*?)</script>", html, re.S)
    digests = (base64.b64encode(hashlib.sha256(s).digest()).decode() for s in scripts)
    return " ".join(f"'sha256-{d}'" for d in digests)


def _page(html: bytes, policy: str) -> HTMLResponse:
    return HTMLResponse(
        html,
        headers={
            "content-security-policy": policy,
            "x-frame-options": "DENY",
            "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer",
        },
    )


def install_docs(app: FastAPI) -> None:
    """Serve `/docs` and `/redoc` (create the app with `docs_url=None, redoc_url=None`)."""
    openapi_url = app.openapi_url or "/openapi.json"
    swagger = bytes(
        get_swagger_ui_html(openapi_url=openapi_url, title=f"{app.title} - Swagger UI").body
    )
    swagger_policy = (
        f"{_COMMON}; script-src {CDN} {_inline_script_hashes(swagger)}; "
        # Swagger UI sets style attributes on its elements.
        f"style-src {CDN} 'unsafe-inline'"
    )
    redoc = bytes(get_redoc_html(openapi_url=openapi_url, title=f"{app.title} - ReDoc").body)
    redoc_policy = (
        f"{_COMMON}; script-src {CDN}; worker-src blob:; "
        "style-src 'unsafe-inline' https://fonts.googleapis.com; font-src https://fonts.gstatic.com"
    )

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return _page(swagger, swagger_policy)

    @app.get("/redoc", include_in_schema=False)
    async def redoc_ui() -> HTMLResponse:
        return _page(redoc, redoc_policy)
