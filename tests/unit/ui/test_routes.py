"""The console shares its process and event loop with the prediction API: no console route may
do its database work (or argon2) on that loop."""

from __future__ import annotations

import inspect

from fastapi.routing import APIRoute

from backend.ui.app import ROUTE_MODULES


def test_every_console_route_runs_in_the_thread_pool() -> None:
    routes = [r for m in ROUTE_MODULES for r in m.router.routes if isinstance(r, APIRoute)]
    posts = [r for r in routes if "POST" in r.methods]
    assert len(posts) >= 8  # sign-in, sign-out, policies, objectives, what-if, admin
    on_loop = [r.path for r in routes if inspect.iscoroutinefunction(r.endpoint)]
    assert on_loop == []
