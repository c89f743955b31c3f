"""The caller's identity for routes, and what it may do.

A bearer token (`Authorization: Bearer hr_...`) names a user and its scopes (ingest, predict,
admin). With `auth.required` off (a single-user local install) calls act as the local admin.
The upstream-compatible routes cannot carry credentials (the llm-d EPP sends none), so they
are open when `auth.trust_upstream_routes` says their network is trusted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from backend.auth.service import LOCAL_ACTOR, Actor, Scope
from backend.deps import RuntimeDep
from backend.exceptions import Forbidden

_BEARER = {"WWW-Authenticate": "Bearer"}


def _bearer(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


async def current_actor(request: Request, runtime: RuntimeDep) -> Actor:
    # Async, like every dependency of the data plane: FastAPI runs a plain `def` dependency in
    # its thread pool, and three such hand-offs cost more than the prediction itself.
    token = _bearer(request)
    if token is not None:
        found, actor = runtime.tokens.cached(token)
        if not found:  # a database read at most every few seconds per token: off the loop
            actor = await run_in_threadpool(runtime.tokens.resolve, token)
        if actor is None:
            raise HTTPException(401, "invalid or revoked token", _BEARER)
        return actor
    if runtime.settings.auth.required:
        raise HTTPException(401, "a bearer token is required", _BEARER)
    return LOCAL_ACTOR


ActorDep = Annotated[Actor, Depends(current_actor)]


async def editor(actor: ActorDep) -> Actor:
    """Control-plane writes: an editor or admin, through a token with the admin scope."""
    if not actor.can_edit:
        raise Forbidden(f"{actor.name} is a {actor.role}; editing needs editor or admin")
    if "admin" not in actor.scopes:
        raise Forbidden("this token lacks the admin scope that control-plane writes need")
    return actor


EditorDep = Annotated[Actor, Depends(editor)]


def scope(needed: Scope, *, upstream: bool = False) -> Callable[..., Awaitable[Actor]]:
    """A dependency requiring `needed` on data-plane routes (open when auth is off, and for
    upstream routes when their network is trusted)."""

    async def check(request: Request, runtime: RuntimeDep) -> Actor:
        auth = runtime.settings.auth
        if not auth.required or (upstream and auth.trust_upstream_routes):
            return LOCAL_ACTOR
        actor = await current_actor(request, runtime)
        if needed not in actor.scopes and "admin" not in actor.scopes:
            raise Forbidden(f"this token lacks the {needed} scope")
        return actor

    return check
