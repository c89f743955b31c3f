"""Admin: users, their roles and console sessions, and API tokens (shown once, stored hashed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy.orm import Session
from starlette.responses import RedirectResponse, Response

from backend.auth import service as auth
from backend.auth.service import ROLES, SCOPES, Actor
from backend.auth.sessions import active_session_counts
from backend.deps import IdPath, SessionDep
from backend.exceptions import Conflict, Invalid
from backend.ui.deps import ConsoleAdmin, ConsoleState, FormDep, StateDep, see_other

router = APIRouter()


def _render(
    request: Request,
    state: ConsoleState,
    session: Session,
    actor: Actor,
    *,
    new_token: dict[str, Any] | None = None,
    user_form: dict[str, str] | None = None,
    token_form: dict[str, Any] | None = None,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return state.renderer.page(
        request,
        "admin.html",
        {
            "users": auth.list_users(session),
            "session_counts": active_session_counts(session, state.clock()),
            "tokens": auth.list_tokens(session),
            "roles": ROLES,
            "scopes": SCOPES,
            "new_token": new_token,
            "user_form": user_form or {"username": "", "role": "viewer"},
            "token_form": token_form or {"user": actor.name, "name": "", "scopes": []},
            "errors": errors or {},
        },
        actor=actor,
        active="admin",
        status_code=status_code,
    )


def _back(request: Request) -> RedirectResponse:
    return see_other(request, "/admin")


@router.get("/admin")
def admin_page(
    request: Request, state: StateDep, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    return _render(request, state, session, actor)


@router.post("/admin/users")
def create_user(
    request: Request, form: FormDep, state: StateDep, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    username = str(form.get("username", "")).strip()
    role = str(form.get("role", "viewer"))
    password = str(form.get("password", ""))
    try:
        auth.add_user(session, username, password, role)
    except Invalid as exc:
        errors = {exc.field or "username": exc.detail}
    except Conflict as exc:
        errors = {"username": exc.detail}
    else:
        request.session["flash"] = f"User {username} ({role}) created."
        return _back(request)
    return _render(
        request,
        state,
        session,
        actor,
        user_form={"username": username, "role": role},
        errors=errors,
        status_code=422,
    )


@router.post("/admin/users/{user_id}")
def change_user(
    user_id: IdPath, request: Request, form: FormDep, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    action = str(form.get("action", ""))
    role = str(form.get("role", ""))
    request.session["flash"] = auth.change_user(session, user_id, action, role, actor)
    return _back(request)


@router.post("/admin/users/{user_id}/sign-out")
def sign_out_everywhere(
    user_id: IdPath, request: Request, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    """End every console session of a user (a lost laptop, a shared cookie). Allowed on
    oneself too: it ends this session as well, and the next page asks to sign in."""
    user, ended = auth.sign_out_everywhere(session, user_id)
    request.session["flash"] = (
        f"{user.username} signed out everywhere ({ended} session{'s' if ended != 1 else ''})."
    )
    return _back(request)


@router.post("/admin/tokens")
def create_token(
    request: Request, form: FormDep, state: StateDep, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    owner_name = str(form.get("user", "")).strip()
    name = str(form.get("name", "")).strip()
    scopes = [str(s) for s in form.getlist("scopes")]
    errors: dict[str, str] = {}
    owner = auth.user_by_name(session, owner_name) if auth.is_valid_username(owner_name) else None
    if owner is None:
        errors["user"] = f"No user {owner_name!r}."
    else:
        try:
            token, clear = auth.issue_token(session, owner, name, scopes)
        except Invalid as exc:
            errors[exc.field or "name"] = exc.detail
    if errors or owner is None:
        return _render(
            request,
            state,
            session,
            actor,
            token_form={"user": owner_name, "name": name, "scopes": scopes},
            errors=errors,
            status_code=422,
        )
    # The clear token is in this one response and nowhere else: not in the session, not in a
    # URL, not in the database.
    return _render(
        request,
        state,
        session,
        actor,
        new_token={
            "text": clear,
            "name": token.name,
            "owner": owner.username,
            "scopes": token.scopes,
        },
    )


@router.post("/admin/tokens/{token_id}/revoke")
def revoke_token(
    token_id: IdPath, request: Request, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    token = auth.revoke_token(session, token_id)
    request.session["flash"] = f"Token {token.prefix}... revoked by {actor.name}."
    return _back(request)
