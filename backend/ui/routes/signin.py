"""Sign-in and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from backend.auth.service import count_users
from backend.auth.sessions import Client, attempt_sign_in, end_session, signed_in_user
from backend.auth.throttle import SignInLimits
from backend.deps import SessionDep
from backend.ui.deps import FormDep, StateDep, client_ip

router = APIRouter()


def _safe_next(request: Request, target: str | None) -> str:
    """Only a path inside the console: never an open redirect to another site."""
    root = request.scope.get("root_path", "")
    if target and target.startswith(f"{root}/") and not target.startswith("//"):
        return target
    return f"{root}/"


@router.get("/login")
def login_page(
    request: Request,
    state: StateDep,
    session: SessionDep,
    next: str | None = Query(None),
) -> Response:
    if signed_in_user(session, request.session, state.clock()) is not None:
        return RedirectResponse(_safe_next(request, next), status_code=303)
    return state.renderer.page(
        request,
        "login.html",
        {
            "next": _safe_next(request, next),
            "error": None,
            "username": "",
            "no_users": count_users(session) == 0,
        },
        actor=None,
    )


@router.post("/login")
def login(request: Request, form: FormDep, state: StateDep, session: SessionDep) -> Response:
    username = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    target = _safe_next(request, str(form.get("next", "")))

    def refuse(error: str, status_code: int, headers: dict[str, str] | None = None) -> Response:
        return state.renderer.page(
            request,
            "login.html",
            {
                "next": target,
                "error": error,
                "username": username,
                "no_users": count_users(session) == 0,
            },
            actor=None,
            status_code=status_code,
            headers=headers,
        )

    result = attempt_sign_in(
        session,
        request.session,
        username,
        password,
        now=state.clock(),
        limits=SignInLimits.from_settings(state.settings.ui),
        max_age_s=state.settings.ui.session_max_age_s,
        client=Client(request.headers.get("user-agent"), client_ip(request)),
    )
    if result.lockout is not None:
        return refuse(
            result.lockout.message, 429, {"Retry-After": str(result.lockout.retry_after_s)}
        )
    if result.user is None:
        return refuse("Wrong username or password.", 401)
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
def logout(request: Request, session: SessionDep) -> Response:
    end_session(session, request.session)
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/login", status_code=303)
