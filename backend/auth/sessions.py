"""Console sign-in sessions: a signed cookie that names the user, checked against the database.

The cookie (Starlette's SessionMiddleware: JSON signed with itsdangerous, with a timestamp that
`max_age` bounds) carries the user's id, a fingerprint of their password hash and the CSRF
token. The user row is read again on every request, so a disabled user, a changed role or a
changed password takes effect at once; a cookie whose signature does not verify is ignored
(the request is anonymous).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import MutableMapping
from typing import Any

from sqlalchemy.orm import Session

from backend.auth.models import User
from backend.auth.service import Actor
from backend.settings import Settings

COOKIE_NAME = "headroom_session"
MIN_SECRET_LENGTH = 32
# Values that tutorials, templates and compose files ship; a deployment must not keep them.
PLACEHOLDER_SECRETS = frozenset(
    {"changethis", "changeme", "change-me", "change_me", "secret", "placeholder", "headroom"}
)


class InsecureSecret(RuntimeError):
    pass


def session_secret(settings: Settings) -> str:
    """The key that signs session cookies; refuses a missing (production) or weak one."""
    configured = settings.ui.session_secret
    if configured is None:
        if settings.embedded:
            # One process, so a key per start is consistent; sessions end with the process.
            return secrets.token_urlsafe(32)
        raise InsecureSecret(
            "HEADROOM_UI__SESSION_SECRET is not set. In production mode (HEADROOM_REDIS_URL is "
            "set) every API replica must sign console sessions with the same key: generate one "
            "with `python -c 'import secrets; print(secrets.token_urlsafe(32))'` and give it to "
            "every replica."
        )
    value = configured.get_secret_value()
    if value.strip().lower() in PLACEHOLDER_SECRETS or len(value) < MIN_SECRET_LENGTH:
        raise InsecureSecret(
            f"HEADROOM_UI__SESSION_SECRET is a placeholder or shorter than {MIN_SECRET_LENGTH} "
            "characters; generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`."
        )
    return value


def password_fingerprint(user: User) -> str:
    """Changes whenever the password does, which ends every session signed in with the old one."""
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:16]


def new_csrf_token() -> str:
    return secrets.token_urlsafe(32)


def csrf_token(session: MutableMapping[str, Any]) -> str:
    """The session's CSRF token, made on first use (anonymous sessions need one to sign in)."""
    token = session.get("csrf")
    if not isinstance(token, str) or not token:
        token = new_csrf_token()
        session["csrf"] = token
    return token


def csrf_matches(session: MutableMapping[str, Any], submitted: str | None) -> bool:
    expected = session.get("csrf")
    if not isinstance(expected, str) or not expected or not submitted:
        return False
    return hmac.compare_digest(expected.encode(), submitted.encode())


def sign_in(session: MutableMapping[str, Any], user: User) -> None:
    """Start a fresh session for `user`: nothing of the anonymous one survives (no fixation)."""
    session.clear()
    session["uid"] = user.id
    session["pv"] = password_fingerprint(user)
    session["csrf"] = new_csrf_token()


def sign_out(session: MutableMapping[str, Any]) -> None:
    session.clear()


def signed_in_user(db: Session, session: MutableMapping[str, Any]) -> User | None:
    """The session's user, or None when nobody is signed in or the session no longer holds."""
    uid = session.get("uid")
    if not isinstance(uid, int):
        return None
    user = db.get(User, uid)
    fingerprint = session.get("pv")
    if (
        user is None
        or user.disabled
        or not isinstance(fingerprint, str)
        or not hmac.compare_digest(fingerprint, password_fingerprint(user))
    ):
        session.clear()
        return None
    return user


def actor_of(user: User) -> Actor:
    # Console users act through their role; token scopes belong to the data plane.
    return Actor(user.username, user.role, frozenset())  # type: ignore[arg-type]
