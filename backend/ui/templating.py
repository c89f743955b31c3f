"""Where the console's templates and static files are, and how a page is rendered."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.templating import Jinja2Templates
from jinja2 import StrictUndefined
from starlette.responses import HTMLResponse

from backend.auth.service import Actor
from backend.auth.sessions import csrf_token
from backend.settings import Settings

NAV = (
    ("overview", "Overview", "/"),
    ("models", "Models", "/models"),
    ("samples", "Samples", "/samples"),
    ("policies", "Policies", "/policies"),
    ("objectives", "Objectives", "/objectives"),
    ("whatif", "What-if", "/whatif"),
    ("admin", "Admin", "/admin"),
)


def frontend_dir(settings: Settings) -> Path:
    """The `frontend/` folder: configured, next to the package (a checkout or an editable
    install), or under the working directory (the Docker image copies it to /app)."""
    if settings.ui.frontend_dir:
        return Path(settings.ui.frontend_dir)
    beside = Path(__file__).resolve().parents[2] / "frontend"
    return beside if (beside / "templates").is_dir() else Path.cwd() / "frontend"


def age(value: datetime | None, now: datetime | None = None) -> str:
    """'12 s', '4 min', '3 h', '2 d': how long ago."""
    if value is None:
        return "never"
    seconds = ((now or datetime.now(UTC)) - value).total_seconds()
    return duration(max(seconds, 0.0))


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 36 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def pct(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage; 'n/a' when there is none."""
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * 100:.{digits}f} %"


def signed_pct(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value * 100:+.1f} %"


def number(value: float | None, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def weight_split(text: str) -> tuple[int, int] | None:
    """'0.8' -> (80, 20): the TTFT/TPOT weighting as the slider shows it."""
    try:
        weight = float(text)
    except ValueError:
        return None
    if not 0 <= weight <= 1:
        return None
    ttft = round(weight * 100)
    return ttft, 100 - ttft


def make_templates(settings: Settings) -> Jinja2Templates:
    templates = Jinja2Templates(directory=frontend_dir(settings) / "templates")
    env = templates.env
    env.filters.update(
        age=age,
        duration=duration,
        pct=pct,
        signed_pct=signed_pct,
        number=number,
        weight_split=weight_split,
    )
    env.globals["nav"] = NAV
    # Strict: a typo in a template is an error in the tests, not an empty cell in production.
    env.undefined = StrictUndefined
    return templates


class Renderer:
    """Renders a page with what every page needs: the signed-in actor and the CSRF token."""

    def __init__(self, templates: Jinja2Templates) -> None:
        self.templates = templates

    def page(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        *,
        actor: Actor | None,
        active: str = "",
        status_code: int = 200,
        headers: dict[str, str] | None = None,
    ) -> HTMLResponse:
        # An error raised before the session middleware ran has no session to draw from.
        session = request.session if "session" in request.scope else {}
        full = {
            "actor": actor,
            "active": active,
            "csrf_token": csrf_token(session),
            "flash": session.pop("flash", None) if actor is not None else None,
            "root": request.scope.get("root_path", ""),
            **context,
        }
        response: HTMLResponse = self.templates.TemplateResponse(
            request, name, full, status_code=status_code, headers=headers
        )
        return response
