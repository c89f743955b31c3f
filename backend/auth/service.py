"""Users, roles and API tokens (console sessions: `backend.auth.sessions`)."""

from __future__ import annotations

import hashlib
import re
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
from backend.exceptions import Conflict, Invalid, NotFound
from backend.settings import PASSWORD_MIN
from backend.transactions import write

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


class UserExists(Conflict):
    pass


# The one rule for user names (console, CLI, demo): they are shown in pages, audit trails and
# the EPP config export's comments, so only letters, digits and a few separators, and no
# longer than the `users.username` column.
USERNAME_MAX = 63
_USERNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
USERNAME_RULE = (
    f"1 to {USERNAME_MAX} letters, digits, '-', '_' or '.' (starting with a letter or digit)."
)


def is_valid_username(username: str) -> bool:
    return len(username) <= USERNAME_MAX and _USERNAME.fullmatch(username) is not None


def validate_username(username: str) -> str:
    if not is_valid_username(username):
        raise Invalid(USERNAME_RULE, field="username")
    return username


def _validate_password(password: str) -> str:
    if len(password) < PASSWORD_MIN:
        raise Invalid(f"At least {PASSWORD_MIN} characters.", field="password")
    if "\x00" in password:
        raise Invalid("No NUL characters.", field="password")
    return password


def _validate_role(role: str) -> Role:
    if role not in ROLES:
        raise Invalid(f"One of {', '.join(ROLES)}.", field="role")
    return role


def create_user(session: Session, username: str, password: str, role: str) -> User:
    """A new user (flushed, not committed); Invalid names the field that is wrong."""
    validate_username(username)
    _validate_password(password)
    _validate_role(role)
    if session.scalar(select(User.id).where(User.username == username)) is not None:
        raise UserExists(f"user {username!r} already exists")
    user = User(username=username, password_hash=_hasher.hash(password), role=role)
    session.add(user)
    session.flush()
    return user


def add_user(session: Session, username: str, password: str, role: str) -> User:
    """Create a user, committed (the console's Admin page and `headroom user create`)."""
    with write(session, conflict=f"user {username!r} already exists"):
        return create_user(session, username, password, role)


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
        raise Invalid(f"Choose at least one of {', '.join(SCOPES)}.", field="scopes")
    if not name or len(name) > 100 or not name.isprintable():
        raise Invalid(
            "A label of 1 to 100 printable characters, to recognise the token by.", field="name"
        )
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


def set_role(session: Session, user: User, role: str) -> User:
    user.role = _validate_role(role)
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
    user.password_hash = _hasher.hash(_validate_password(password))
    end_user_sessions(session, user.id)
    session.flush()
    return user


def end_user_sessions(session: Session, user_id: int) -> int:
    """Delete every console session of a user (sign out everywhere); how many there were."""
    result = session.execute(delete(UiSession).where(UiSession.user_id == user_id))
    return int(result.rowcount)  # type: ignore[attr-defined]


def change_user(session: Session, user_id: int, action: str, role: str, actor: Actor) -> str:
    """An admin's change to a user (role, disable, enable), committed; what was done."""
    with write(session):
        user = get_user(session, user_id)
        if user.username == actor.name and action in ("role", "disable"):
            # The last admin locking themselves out needs a shell to undo; refuse it here.
            raise Conflict("You cannot change your own role or disable yourself.")
        if action == "role":
            set_role(session, user, role)
            return f"{user.username} is now a {role}."
        if action in ("disable", "enable"):
            set_disabled(session, user, action == "disable")
            return f"{user.username} {action}d."
        raise Invalid("action: role, disable or enable", field="action")


def sign_out_everywhere(session: Session, user_id: int) -> tuple[User, int]:
    """End every console session of a user, committed; the user and how many there were."""
    with write(session):
        user = get_user(session, user_id)
        return user, end_user_sessions(session, user.id)


def list_tokens(session: Session) -> Sequence[tuple[ApiToken, str]]:
    """Every token with its owner's name, newest first (hashes only: nothing to reveal)."""
    rows = session.execute(
        select(ApiToken, User.username)
        .join(User, User.id == ApiToken.user_id)
        .order_by(ApiToken.id.desc())
    )
    return [(token, username) for token, username in rows]


def issue_token(session: Session, user: User, name: str, scopes: list[str]) -> tuple[ApiToken, str]:
    """A new token, committed; the clear text is returned here and never again."""
    with write(session):
        return create_token(session, user, name, scopes)


def revoke_token(session: Session, token_id: int) -> ApiToken:
    with write(session):
        token = session.get(ApiToken, token_id, with_for_update=True)
        if token is None:
            raise NotFound(f"token {token_id} not found")
        if token.revoked_at is None:
            token.revoked_at = datetime.now(UTC)
    return token
