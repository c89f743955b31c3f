"""The caller's identity for routes: a bearer token, or the local actor when auth is off."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from backend.auth.service import LOCAL_ACTOR, Actor, actor_for_token
from backend.deps import RuntimeDep


def current_actor(request: Request, runtime: RuntimeDep) -> Actor:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer" and credentials:
        with runtime.sessions() as session:
            actor = actor_for_token(session, credentials.strip())
        if actor is None:
            raise HTTPException(401, "invalid or revoked token", {"WWW-Authenticate": "Bearer"})
        return actor
    if runtime.settings.auth.required:
        raise HTTPException(401, "a bearer token is required", {"WWW-Authenticate": "Bearer"})
    return LOCAL_ACTOR


ActorDep = Annotated[Actor, Depends(current_actor)]


def editor(actor: ActorDep) -> Actor:
    """Control-plane writes: editors and admins only."""
    if not actor.can_edit:
        raise HTTPException(403, f"{actor.name} is a {actor.role}; editing needs editor or admin")
    return actor


EditorDep = Annotated[Actor, Depends(editor)]
