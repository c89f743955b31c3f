"""Console sign-in sessions: a signed cookie naming a session row of the database.

The cookie (Starlette's SessionMiddleware: JSON signed with itsdangerous, with a timestamp that
`max_age` bounds) carries a random session id and the CSRF token. The id is only valid while its
row in `ui_sessions` exists (only the id's SHA-256 is stored) and has not expired, and while its
user is enabled: signing out deletes the row, so a copy of the cookie is worth nothing
afterwards, on every API replica. A password change, disabling the user and an admin's "sign out
everywhere" delete the user's rows (`backend.auth.service.end_user_sessions`). The user row is
read on every request, so a changed role takes effect at once. A cookie whose signature does not
verify is ignored (the request is anonymous).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from backend.auth.models import UiSession, User
from backend.auth.service import Actor, is_valid_username, set_password, verify_password
from backend.auth.throttle import (
    ADDRESS_WIDTH,
    Lockout,
    SignInLimits,
    clear_failures,
    lockout,
    one_at_a_time,
    purge_failures,
    record_failure,
)
from backend.exceptions import Invalid
from backend.settings import Settings
from backend.transactions import write

COOKIE_NAME = "headroom_session"
# The cookie key holding the session id (cookies of earlier releases have none: signed out).
SESSION_KEY = "sid"
# last_seen_at is informative (Admin page), so it is written at most this often per session,
# not on every request: a page that polls every 5 s must not mean a database write each time.
LAST_SEEN_RESOLUTION = timedelta(minutes=1)

MIN_SECRET_LENGTH = 32
# Values that tutorials, templates and compose files ship; a deployment must not keep them.
PLACEHOLDER_SECRETS = frozenset(
    {"changethis", "changeme", "change-me", "change_me", "secret", "placeholder", "headroom"}
)


Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


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


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


@dataclass(frozen=True)
class Client:
    """Who is signing in from where; recorded on the session row, never checked."""

    user_agent: str | None = None
    ip: str | None = None


def sign_in(
    db: Session,
    session: MutableMapping[str, Any],
    user: User,
    *,
    now: datetime,
    max_age_s: int,
    client: Client | None = None,
) -> UiSession:
    """Start a fresh session for `user`: a new row, and a cookie that names it and nothing of
    the anonymous one (no fixation: not even the CSRF token survives). The caller commits."""
    client = client or Client()
    session_id = secrets.token_urlsafe(32)
    row = UiSession(
        session_hash=_digest(session_id),
        user_id=user.id,
        created_at=now,
        last_seen_at=now,
        expires_at=now + timedelta(seconds=max_age_s),
        user_agent=client.user_agent[:255] if client.user_agent else None,
        client_ip=client.ip[:ADDRESS_WIDTH] if client.ip else None,
    )
    db.add(row)
    db.flush()
    session.clear()
    session[SESSION_KEY] = session_id
    session["csrf"] = new_csrf_token()
    return row


def sign_out(db: Session, session: MutableMapping[str, Any]) -> None:
    """Delete the session's row (a copy of the cookie is refused from now on) and clear the
    cookie. The caller commits."""
    session_id = session.get(SESSION_KEY)
    if isinstance(session_id, str) and session_id:
        db.execute(delete(UiSession).where(UiSession.session_hash == _digest(session_id)))
    session.clear()


def signed_in_user(db: Session, session: MutableMapping[str, Any], now: datetime) -> User | None:
    """The session's user, or None when nobody is signed in or the session no longer holds
    (signed out, expired, ended by an admin or a password change, user disabled)."""
    session_id = session.get(SESSION_KEY)
    if not isinstance(session_id, str) or not session_id:
        return None
    found = db.execute(
        select(UiSession, User)
        .join(User, User.id == UiSession.user_id)
        .where(UiSession.session_hash == _digest(session_id))
    ).first()
    if found is None:
        session.clear()
        return None
    row, user = found
    if row.expires_at <= now or user.disabled:
        session.clear()
        return None
    if now - row.last_seen_at >= LAST_SEEN_RESOLUTION:
        # A plain UPDATE (not the ORM's, which would fail on a row signed out a moment ago by
        # another request), committed here: most console requests are reads that commit nothing.
        db.execute(
            update(UiSession)
            .where(UiSession.session_hash == row.session_hash)
            .values(last_seen_at=now)
        )
        db.commit()
    return user


def active_session_counts(db: Session, now: datetime) -> dict[int, int]:
    """Unexpired sessions per user id (users without any are absent)."""
    rows = db.execute(
        select(UiSession.user_id, func.count())
        .where(UiSession.expires_at > now)
        .group_by(UiSession.user_id)
    )
    return {int(user_id): int(count) for user_id, count in rows}


def purge_expired(db: Session, now: datetime, settings: Settings) -> tuple[int, int]:
    """Delete expired sessions and the failed sign-ins that no longer count (both are refused
    or ignored anyway; this only keeps the tables small). Returns how many of each."""
    sessions = db.execute(delete(UiSession).where(UiSession.expires_at <= now))
    failures = purge_failures(db, now, timedelta(seconds=settings.ui.sign_in_failure_window_s))
    return int(sessions.rowcount), failures  # type: ignore[attr-defined]


def actor_of(user: User) -> Actor:
    # Console users act through their role; token scopes belong to the data plane.
    return Actor(user.username, user.role, frozenset())  # type: ignore[arg-type]


@dataclass(frozen=True)
class SignInResult:
    """A signed-in user, or why not: `lockout` (429) or a wrong name or password (401)."""

    user: User | None
    lockout: Lockout | None = None


def attempt_sign_in(
    db: Session,
    cookie: MutableMapping[str, Any],
    username: str,
    password: str,
    *,
    now: datetime,
    limits: SignInLimits,
    max_age_s: int,
    client: Client,
) -> SignInResult:
    """The console's sign-in, one unit of work: the limit is checked, the password verified and
    the failure recorded while no other attempt on the same name can run (`one_at_a_time`), so
    a simultaneous burst reaches the password check at most `limits.per_user` times."""
    address = client.ip or "unknown"
    # A name no user can have (a NUL byte, a newline, too long) is never looked up or recorded:
    # only the address's limit applies to it.
    valid = is_valid_username(username)
    key = username if valid else ""
    with one_at_a_time(db, key), write(db):
        # Before the password is looked at: while locked, a right guess and a wrong one get
        # the same answer, and no argon2 verification is spent.
        locked = lockout(db, key, address, now, limits)
        if locked is not None:
            return SignInResult(None, locked)
        if not valid or not password:
            # Not a guess at a real account (the form requires both): nothing to count.
            return SignInResult(None)
        user = verify_password(db, username, password)
        if user is None:
            record_failure(db, username, address, now)
            return SignInResult(None)
        clear_failures(db, username)
        sign_in(db, cookie, user, now=now, max_age_s=max_age_s, client=client)
        return SignInResult(user)


def change_password(
    db: Session,
    cookie: MutableMapping[str, Any],
    user: User,
    current: str,
    new: str,
    *,
    now: datetime,
    max_age_s: int,
    client: Client,
) -> None:
    """The signed-in user's own change: with the current password right, every console session
    of the user ends (a copied cookie, another browser) and this one starts afresh."""
    with write(db):
        if verify_password(db, user.username, current) is None:
            raise Invalid("The current password is wrong.", field="current_password")
        set_password(db, user, new)
        sign_in(db, cookie, user, now=now, max_age_s=max_age_s, client=client)


def end_session(db: Session, cookie: MutableMapping[str, Any]) -> None:
    """Sign out, committed."""
    with write(db):
        sign_out(db, cookie)
