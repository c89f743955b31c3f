"""The caller's identity for routes, and what it may do.

A bearer token (`Authorization: Bearer hr_...`) names a user and its scopes (ingest, predict,
admin). With `auth.required` off (a single-user local install) calls act as the local admin.
The upstream-compatible routes cannot carry credentials (the llm-d EPP sends none), so they
are open when `auth.trust_upstream_routes` says their network is trusted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import lru_cache
from ipaddress import IPv4Network, IPv6Network, ip_address
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from backend.auth.service import LOCAL_ACTOR, Actor, Scope
from backend.deps import Runtime, RuntimeDep
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


@lru_cache(maxsize=4096)
def _within(host: str, networks: tuple[IPv4Network | IPv6Network, ...]) -> bool:
    # Cached per client address: the EPP is one or a few addresses calling many times a second.
    try:
        address = ip_address(host)
    except ValueError:  # not an IP (a test client's "testclient"): never inside a network
        return False
    return any(address in network for network in networks)


def _upstream_open(request: Request, runtime: Runtime) -> bool:
    """True when the upstream trust lets this request in without a token. A client outside
    `auth.upstream_networks` is refused (403) unless it brings a token for the check that
    follows (and tokens mean something only when `auth.required` is on)."""
    auth = runtime.settings.auth
    if auth.upstream_networks:
        host = request.client.host if request.client is not None else ""
        if not _within(host, tuple(auth.upstream_networks)):
            if _bearer(request) is None or not auth.required:
                raise HTTPException(403, f"client {host} is not in auth.upstream_networks")
            return False
    return not auth.required or auth.trust_upstream_routes


def scope(needed: Scope, *, upstream: bool = False) -> Callable[..., Awaitable[Actor]]:
    """A dependency requiring `needed` on data-plane routes (open when auth is off, and for
    upstream routes when their network is trusted).

    Upstream routes are refused (403) to a client outside `auth.upstream_networks` without a
    token, before anything of its request is read.
    """

    async def check(request: Request, runtime: RuntimeDep) -> Actor:
        if upstream and _upstream_open(request, runtime):
            return LOCAL_ACTOR
        if not runtime.settings.auth.required:
            return LOCAL_ACTOR
        actor = await current_actor(request, runtime)
        if needed not in actor.scopes and "admin" not in actor.scopes:
            raise Forbidden(f"this token lacks the {needed} scope")
        return actor

    return check


async def metrics_reader(request: Request, runtime: RuntimeDep) -> Actor:
    """`/metrics`: open exactly where the upstream routes are (the same networks, the same
    trust); elsewhere any valid token may read it, as it may read the control plane."""
    if _upstream_open(request, runtime):
        return LOCAL_ACTOR
    return await current_actor(request, runtime)
