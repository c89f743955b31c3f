"""Sign-in and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from backend.auth.service import count_users, verify_password
from backend.auth.sessions import Client, sign_in, sign_out, signed_in_user
from backend.auth.throttle import SignInLimits, clear_failures, lockout, record_failure
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
    now = state.clock()
    address = client_ip(request)

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

    # Before the password is looked at: while locked, a right guess and a wrong one get the
    # same answer, and no argon2 verification is spent.
    locked = lockout(session, username, address, now, SignInLimits.from_settings(state.settings.ui))
    if locked is not None:
        return refuse(locked.message, 429, {"Retry-After": str(locked.retry_after_s)})
    if not username or not password:
        # Not a guess (the form requires both): nothing to count.
        return refuse("Wrong username or password.", 401)
    user = verify_password(session, username, password)
    if user is None:
        record_failure(session, username, address, now)
        session.commit()
        return refuse("Wrong username or password.", 401)
    clear_failures(session, username)
    sign_in(
        session,
        request.session,
        user,
        now=now,
        max_age_s=state.settings.ui.session_max_age_s,
        client=Client(request.headers.get("user-agent"), address),
    )
    session.commit()
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
def logout(request: Request, session: SessionDep) -> Response:
    sign_out(session, request.session)
    session.commit()
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/login", status_code=303)
