"""Sign-in and sign-out."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request
from starlette.responses import RedirectResponse, Response

from backend.auth.service import count_users, verify_password
from backend.auth.sessions import sign_in, sign_out, signed_in_user
from backend.deps import SessionDep
from backend.ui.deps import StateDep

router = APIRouter()


def _safe_next(request: Request, target: str | None) -> str:
    """Only a path inside the console: never an open redirect to another site."""
    root = request.scope.get("root_path", "")
    if target and target.startswith(f"{root}/") and not target.startswith("//"):
        return target
    return f"{root}/"


@router.get("/login")
def login_page(
    request: Request, state: StateDep, session: SessionDep, next: str | None = Query(None)
) -> Response:
    if signed_in_user(session, request.session) is not None:
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
async def login(request: Request, state: StateDep, session: SessionDep) -> Response:
    form = await request.form()
    username = str(form.get("username", "")).strip()
    password = str(form.get("password", ""))
    target = _safe_next(request, str(form.get("next", "")))
    user = verify_password(session, username, password) if username and password else None
    if user is None:
        return state.renderer.page(
            request,
            "login.html",
            {
                "next": target,
                "error": "Wrong username or password.",
                "username": username,
                "no_users": count_users(session) == 0,
            },
            actor=None,
            status_code=401,
        )
    sign_in(request.session, user)
    return RedirectResponse(target, status_code=303)


@router.post("/logout")
def logout(request: Request) -> Response:
    sign_out(request.session)
    root = request.scope.get("root_path", "")
    return RedirectResponse(f"{root}/login", status_code=303)
