"""The console shares its process and event loop with the prediction API: no console route may
do its database work (or argon2) on that loop."""

from __future__ import annotations

import inspect
import pkgutil
from pathlib import Path

from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import Mount

from backend.app import create_app
from backend.settings import Settings
from backend.ui import routes as ui_routes
from backend.ui.app import PREFIX


def console_routes(tmp_path: Path) -> list[APIRoute]:
    """Every route of the console as the application mounts it (not a list kept by hand, which
    a new routes module could be missing from)."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'routes.db'}"))
    console = next(r.app for r in app.routes if isinstance(r, Mount) and r.path == PREFIX)
    assert isinstance(console, FastAPI)
    # FastAPI keeps included routers as such; iter_route_contexts flattens them.
    routes = [c.original_route for c in iter_route_contexts(console.routes)]
    return [r for r in routes if isinstance(r, APIRoute)]


def test_every_console_route_runs_in_the_thread_pool(tmp_path: Path) -> None:
    routes = console_routes(tmp_path)
    # Every routes module is mounted, so the check below covers each of them.
    mounted = {r.endpoint.__module__ for r in routes}
    assert mounted == {
        f"{ui_routes.__name__}.{m.name}" for m in pkgutil.iter_modules(ui_routes.__path__)
    }
    posts = [r for r in routes if "POST" in r.methods]
    assert len(posts) >= 8  # sign-in, sign-out, policies, objectives, what-if, admin
    on_loop = [r.path for r in routes if inspect.iscoroutinefunction(r.endpoint)]
    assert on_loop == []
