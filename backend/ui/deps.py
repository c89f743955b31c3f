"""What console routes depend on: the signed-in user, their role, the CSRF check, the pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Query, Request
from fastapi.responses import RedirectResponse
from starlette.datastructures import FormData

from backend.auth.service import Actor
from backend.auth.sessions import Clock, actor_of, csrf_matches, signed_in_user, utcnow
from backend.deps import SessionDep
from backend.exceptions import Forbidden
from backend.pools.models import DEFAULT_POOL, Pool
from backend.pools.service import PoolNotFound, list_pools
from backend.predictor.knowable import FloorWindow
from backend.settings import Settings
from backend.ui.templating import Renderer
from backend.whatif.runner import WhatIfRunner

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"


@dataclass
class ConsoleState:
    """What the console's routes share; lives on the sub-application's state."""

    settings: Settings
    renderer: Renderer
    whatif: WhatIfRunner | None = None
    advisor: WhatIfRunner | None = None  # the runtime's (shared with the API's advice routes)
    # Demo mode: the simulated router's predictions beside their present-state floor.
    knowable: FloorWindow | None = None
    # What "now" is for session expiry and the sign-in limits; tests move it instead of sleeping.
    clock: Clock = field(default=utcnow)


def get_state(request: Request) -> ConsoleState:
    state: ConsoleState = request.app.state.console
    return state


StateDep = Annotated[ConsoleState, Depends(get_state)]


class LoginRequired(Exception):
    """Nobody is signed in (or the session no longer holds): go to the sign-in page."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class CsrfRejected(Exception):
    """A state-changing request without the session's CSRF token: refused before any work."""


async def csrf_protect(request: Request) -> None:
    """Every POST of the console must carry the session's token, as the `csrf_token` form field
    or (htmx) the X-CSRF-Token header. Runs before the route and its other dependencies."""
    if request.method in SAFE_METHODS:
        return
    submitted = request.headers.get(CSRF_HEADER)
    if submitted is None:
        content_type = request.headers.get("content-type", "")
        if content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
            value = (await request.form()).get(CSRF_FIELD)
            submitted = value if isinstance(value, str) else None
    if not csrf_matches(request.session, submitted):
        raise CsrfRejected


async def form_data(request: Request) -> FormData:
    """The submitted form, read on the event loop (the body is a stream; Starlette keeps what
    it parsed, so the CSRF check and the route share one parse). With it a route can be a plain
    `def`, which FastAPI runs in its thread pool: a route's database work, or argon2 hashing a
    password, must not hold up the event loop that answers predictions."""
    return await request.form()


FormDep = Annotated[FormData, Depends(form_data)]


def console_actor(request: Request, session: SessionDep, state: StateDep) -> Actor:
    user = signed_in_user(session, request.session, state.clock())
    if user is None:
        target = request.url.path
        if request.url.query:
            target += "?" + request.url.query
        raise LoginRequired(target)
    return actor_of(user)


ConsoleActor = Annotated[Actor, Depends(console_actor)]


def console_editor(actor: ConsoleActor) -> Actor:
    if not actor.can_edit:
        raise Forbidden(
            f"{actor.name} is a {actor.role}: changing this needs an editor or an admin."
        )
    return actor


ConsoleEditor = Annotated[Actor, Depends(console_editor)]


def console_admin(actor: ConsoleActor) -> Actor:
    if actor.role != "admin":
        raise Forbidden(f"{actor.name} is a {actor.role}: this needs an admin.")
    return actor


ConsoleAdmin = Annotated[Actor, Depends(console_admin)]


@dataclass(frozen=True)
class PoolChoice:
    pools: list[Pool]
    selected: Pool


def choose_pool(
    session: SessionDep, pool: str | None = Query(None, description="Pool to show.")
) -> PoolChoice:
    pools = list_pools(session)
    by_name = {p.name: p for p in pools}
    if pool is not None and pool not in by_name:
        raise PoolNotFound(pool)
    name = pool or (DEFAULT_POOL if DEFAULT_POOL in by_name else pools[0].name)
    return PoolChoice(pools, by_name[name])


PoolDep = Annotated[PoolChoice, Depends(choose_pool)]


def client_ip(request: Request) -> str:
    """The address the sign-in limit counts: the peer uvicorn reports, which behind a reverse
    proxy is the X-Forwarded-For client only if uvicorn trusts that proxy (`headroom serve`
    passes HEADROOM_FORWARDED_ALLOW_IPS as uvicorn's forwarded_allow_ips)."""
    return request.client.host if request.client is not None else "unknown"


def see_other(request: Request, path: str) -> RedirectResponse:
    """After a form POST, back to a console page (303, so that a reload does not post again)."""
    return RedirectResponse(f"{request.scope.get('root_path', '')}{path}", status_code=303)
