"""Admin: users, their roles and console sessions, and API tokens (shown once, stored hashed)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from sqlalchemy.orm import Session
from starlette.responses import RedirectResponse, Response

from backend.auth import service as auth
from backend.auth.service import ROLES, SCOPES, Actor
from backend.auth.sessions import active_session_counts
from backend.deps import IdPath, SessionDep
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
    errors: dict[str, str] = {}
    if (
        not username
        or len(username) > 63
        or not username.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ):
        errors["username"] = "1 to 63 letters, digits, '-', '_' or '.'."
    if role not in ROLES:
        errors["role"] = f"One of {', '.join(ROLES)}."
    if len(password) < 8:
        errors["password"] = "At least 8 characters."
    if not errors:
        try:
            auth.create_user(session, username, password, role)  # type: ignore[arg-type]
        except auth.UserExists as exc:
            errors["username"] = str(exc)
        else:
            session.commit()
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
    user_id: int, request: Request, form: FormDep, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    try:
        user = auth.get_user(session, user_id)
    except auth.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    action = str(form.get("action", ""))
    if user.username == actor.name and action in ("role", "disable"):
        # The last admin locking themselves out needs a shell to undo; refuse it here.
        raise HTTPException(409, "You cannot change your own role or disable yourself.")
    if action == "role":
        role = str(form.get("role", ""))
        if role not in ROLES:
            raise HTTPException(422, f"role: one of {', '.join(ROLES)}")
        auth.set_role(session, user, role)
        message = f"{user.username} is now a {role}."
    elif action in ("disable", "enable"):
        auth.set_disabled(session, user, action == "disable")
        message = f"{user.username} {action}d."
    else:
        raise HTTPException(422, "action: role, disable or enable")
    session.commit()
    request.session["flash"] = message
    return _back(request)


@router.post("/admin/users/{user_id}/sign-out")
def sign_out_everywhere(
    user_id: IdPath, request: Request, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    """End every console session of a user (a lost laptop, a shared cookie). Allowed on
    oneself too: it ends this session as well, and the next page asks to sign in."""
    try:
        user = auth.get_user(session, user_id)
    except auth.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    ended = auth.end_user_sessions(session, user.id)
    session.commit()
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
    owner = auth.user_by_name(session, owner_name)
    if owner is None:
        errors["user"] = f"No user {owner_name!r}."
    if not name or len(name) > 100:
        errors["name"] = "A label of 1 to 100 characters, to recognise the token by."
    if not scopes or set(scopes) - set(SCOPES):
        errors["scopes"] = f"Choose at least one of {', '.join(SCOPES)}."
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
    token, clear = auth.create_token(session, owner, name, scopes)
    session.commit()
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
    token_id: int, request: Request, session: SessionDep, actor: ConsoleAdmin
) -> Response:
    try:
        token = auth.revoke_token(session, token_id)
    except auth.NotFound as exc:
        raise HTTPException(404, str(exc)) from None
    session.commit()
    request.session["flash"] = f"Token {token.prefix}... revoked by {actor.name}."
    return _back(request)
