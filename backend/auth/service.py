"""Users, roles and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

from argon2 import PasswordHasher
from argon2.exceptions import VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.models import ApiToken, User

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
