"""The signed-in user's own account: changing their password."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from backend.auth.service import Actor, user_by_name
from backend.auth.sessions import Client, change_password
from backend.deps import SessionDep
from backend.exceptions import Invalid, NotFound
from backend.ui.deps import ConsoleActor, ConsoleState, FormDep, StateDep, client_ip, see_other

router = APIRouter()


def _render(
    request: Request,
    state: ConsoleState,
    actor: Actor,
    errors: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return state.renderer.page(
        request,
        "account.html",
        {"errors": errors or {}},
        actor=actor,
        active="account",
        status_code=status_code,
    )


@router.get("/account")
def account_page(request: Request, state: StateDep, actor: ConsoleActor) -> Response:
    return _render(request, state, actor)


@router.post("/account/password")
def change_own_password(
    request: Request, form: FormDep, state: StateDep, session: SessionDep, actor: ConsoleActor
) -> Response:
    """A new password for the signed-in user (the current one must be given): every other
    console session of theirs ends, and this one continues under a fresh session id."""
    user = user_by_name(session, actor.name)
    if user is None:  # deleted between the session check and here
        raise NotFound(f"user {actor.name!r} not found")
    try:
        change_password(
            session,
            request.session,
            user,
            str(form.get("current_password", "")),
            str(form.get("password", "")),
            now=state.clock(),
            max_age_s=state.settings.ui.session_max_age_s,
            client=Client(request.headers.get("user-agent"), client_ip(request)),
        )
    except Invalid as exc:
        return _render(
            request, state, actor, {exc.field or "password": exc.detail}, status_code=422
        )
    request.session["flash"] = "Password changed; your other sessions have ended."
    return see_other(request, "/account")
