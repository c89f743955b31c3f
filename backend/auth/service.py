"""Users, roles and API tokens (console sessions: `backend.auth.sessions`)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import VerificationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken, UiSession, User

Role = Literal["viewer", "editor", "admin"]
Scope = Literal["ingest", "predict", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "editor", "admin")
SCOPES: tuple[Scope, ...] = ("ingest", "predict", "admin")
TOKEN_PREFIX = "hr_"

_hasher = PasswordHasher()


@dataclass(frozen=True)
class Actor:
    """Who is calling: the identity recorded in audit trails, and what it may do."""

    name: str
    role: Role
    scopes: frozenset[str]

    @property
    def can_edit(self) -> bool:
        return self.role in ("editor", "admin")


# With authentication off (a single-user local install), calls act as this actor.
LOCAL_ACTOR = Actor("local", "admin", frozenset(SCOPES))


class UserExists(ValueError):
    pass


def create_user(session: Session, username: str, password: str, role: Role) -> User:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    if len(password) < 8:
        raise ValueError("password must have at least 8 characters")
    if session.scalar(select(User.id).where(User.username == username)) is not None:
        raise UserExists(f"user {username!r} already exists")
    user = User(username=username, password_hash=_hasher.hash(password), role=role)
    session.add(user)
    session.flush()
    return user


def verify_password(session: Session, username: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.username == username))
    if user is None or user.disabled:
        _hasher.hash(password)  # same cost either way: no user enumeration by timing
        return None
    try:
        _hasher.verify(user.password_hash, password)
    except VerificationError:
        return None
    return user


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    session: Session, user: User, name: str, scopes: list[str]
) -> tuple[ApiToken, str]:
    """A new token; the clear text is returned here and never again."""
    unknown = set(scopes) - set(SCOPES)
    if unknown or not scopes:
        raise ValueError(f"scopes must be a non-empty subset of {SCOPES}")
    clear = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        user_id=user.id,
        name=name,
        token_hash=_digest(clear),
        prefix=clear[:10],
        scopes=sorted(set(scopes)),
    )
    session.add(token)
    session.flush()
    return token, clear


def actor_for_token(session: Session, clear: str) -> Actor | None:
    row = session.execute(
        select(ApiToken, User)
        .join(User, User.id == ApiToken.user_id)
        .where(ApiToken.token_hash == _digest(clear), ApiToken.revoked_at.is_(None))
    ).first()
    if row is None:
        return None
    token, user = row
    if user.disabled:
        return None
    return Actor(user.username, user.role, frozenset(token.scopes))  # type: ignore[arg-type]


# Used by the console's Admin page (and demo mode).


class NotFound(LookupError):
    pass


def count_users(session: Session) -> int:
    return int(session.scalar(select(func.count()).select_from(User)) or 0)


def list_users(session: Session) -> Sequence[User]:
    return session.scalars(select(User).order_by(User.username)).all()


def get_user(session: Session, user_id: int) -> User:
    user = session.get(User, user_id)
    if user is None:
        raise NotFound(f"user {user_id} not found")
    return user


def user_by_name(session: Session, username: str) -> User | None:
    return session.scalar(select(User).where(User.username == username))


def set_role(session: Session, user: User, role: Role) -> User:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    user.role = role
    session.flush()
    return user


def set_disabled(session: Session, user: User, disabled: bool) -> User:
    """A disabled user cannot sign in, their console sessions end, and their tokens stop working
    (within the few seconds that `backend.auth.tokens.TokenCache` keeps a resolved token)."""
    user.disabled = disabled
    if disabled:
        # Deleted, not just refused while disabled: enabling the user again must not bring back
        # a session someone may have copied in the meantime.
        end_user_sessions(session, user.id)
    session.flush()
    return user


def set_password(session: Session, user: User, password: str) -> User:
    """A new password ends every console session of the user: whoever signed in with the old
    one (or copied a cookie) is out, wherever the change was made (console, CLI, demo start)."""
    if len(password) < 8:
        raise ValueError("password must have at least 8 characters")
    user.password_hash = _hasher.hash(password)
    end_user_sessions(session, user.id)
    session.flush()
    return user


def end_user_sessions(session: Session, user_id: int) -> int:
    """Delete every console session of a user (sign out everywhere); how many there were."""
    result = session.execute(delete(UiSession).where(UiSession.user_id == user_id))
    return int(result.rowcount)  # type: ignore[attr-defined]


def list_tokens(session: Session) -> Sequence[tuple[ApiToken, str]]:
    """Every token with its owner's name, newest first (hashes only: nothing to reveal)."""
    rows = session.execute(
        select(ApiToken, User.username)
        .join(User, User.id == ApiToken.user_id)
        .order_by(ApiToken.id.desc())
    )
    return [(token, username) for token, username in rows]


def revoke_token(session: Session, token_id: int) -> ApiToken:
    token = session.get(ApiToken, token_id)
    if token is None:
        raise NotFound(f"token {token_id} not found")
    if token.revoked_at is None:
        token.revoked_at = datetime.now(UTC)
        session.flush()
    return token
