"""Server-side console sessions, on a real (SQLite) database built by the migrations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.models import SignInFailure, UiSession, User
from backend.auth.service import (
    create_user,
    end_user_sessions,
    set_disabled,
    set_password,
    set_role,
)
from backend.auth.sessions import (
    SESSION_KEY,
    Client,
    active_session_counts,
    purge_expired,
    sign_in,
    sign_out,
    signed_in_user,
)
from backend.auth.throttle import record_failure
from backend.settings import Settings, UISettings

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MAX_AGE_S = 3600


@pytest.fixture
def ada(db: Session) -> User:
    user = create_user(db, "ada", "correct-horse-battery", "admin")
    db.commit()
    return user


def _signed_in(db: Session, user: User, now: datetime = T0) -> dict[str, Any]:
    cookie: dict[str, Any] = {"csrf": "anonymous", "flash": "stale"}
    sign_in(db, cookie, user, now=now, max_age_s=MAX_AGE_S, client=Client("pytest", "192.0.2.1"))
    db.commit()
    return cookie


def test_sign_in_stores_only_a_hash_of_a_fresh_id(db: Session, ada: User) -> None:
    cookie = _signed_in(db, ada)
    # Nothing of the anonymous session survives (no fixation), and the cookie names the session.
    assert set(cookie) == {SESSION_KEY, "csrf"} and cookie["csrf"] != "anonymous"
    row = db.scalars(select(UiSession)).one()
    assert cookie[SESSION_KEY] not in row.session_hash and len(row.session_hash) == 64
    assert (row.user_id, row.user_agent, row.client_ip) == (ada.id, "pytest", "192.0.2.1")
    assert row.expires_at == T0 + timedelta(seconds=MAX_AGE_S)
    assert signed_in_user(db, cookie, T0) == ada


def test_a_copy_of_the_cookie_is_refused_after_sign_out(db: Session, ada: User) -> None:
    cookie = _signed_in(db, ada)
    copy = dict(cookie)
    sign_out(db, cookie)
    db.commit()
    assert cookie == {}
    assert db.scalars(select(UiSession)).all() == []
    assert signed_in_user(db, copy, T0) is None
    assert copy == {}  # the refused cookie is cleared, so the browser drops it


def test_sessions_are_independent(db: Session, ada: User) -> None:
    laptop, phone = _signed_in(db, ada), _signed_in(db, ada)
    sign_out(db, laptop)
    db.commit()
    assert signed_in_user(db, phone, T0) == ada


def test_a_session_expires_however_active(db: Session, ada: User) -> None:
    cookie = _signed_in(db, ada)
    end = T0 + timedelta(seconds=MAX_AGE_S)
    assert signed_in_user(db, cookie, end - timedelta(seconds=1)) == ada
    assert signed_in_user(db, dict(cookie), end) is None


def test_a_password_change_ends_every_session(db: Session, ada: User) -> None:
    laptop, phone = _signed_in(db, ada), _signed_in(db, ada)
    set_password(db, ada, "a-brand-new-password")
    db.commit()
    assert signed_in_user(db, laptop, T0) is None
    assert signed_in_user(db, phone, T0) is None


def test_disabling_ends_sessions_for_good_and_a_role_change_does_not(
    db: Session, ada: User
) -> None:
    cookie = _signed_in(db, ada)
    set_role(db, ada, "viewer")
    db.commit()
    user = signed_in_user(db, dict(cookie), T0)
    assert user is not None and user.role == "viewer"  # re-read: the new role applies at once
    set_disabled(db, ada, True)
    db.commit()
    set_disabled(db, ada, False)  # enabling again brings no old session back
    db.commit()
    assert signed_in_user(db, cookie, T0) is None


def test_sign_out_everywhere_counts_what_it_ended(db: Session, ada: User) -> None:
    eddie = create_user(db, "eddie", "correct-horse-battery", "editor")
    cookies = [_signed_in(db, ada), _signed_in(db, ada), _signed_in(db, eddie)]
    _signed_in(db, eddie, now=T0 - timedelta(seconds=2 * MAX_AGE_S))  # expired: not counted
    assert active_session_counts(db, T0) == {ada.id: 2, eddie.id: 1}
    assert end_user_sessions(db, ada.id) == 2
    db.commit()
    assert [signed_in_user(db, dict(c), T0) for c in cookies] == [None, None, eddie]


def test_last_seen_is_written_at_most_once_a_minute(db: Session, ada: User) -> None:
    cookie = _signed_in(db, ada)

    def last_seen() -> datetime:
        db.expire_all()
        return db.scalars(select(UiSession.last_seen_at)).one()

    signed_in_user(db, cookie, T0 + timedelta(seconds=59))
    assert last_seen() == T0
    signed_in_user(db, cookie, T0 + timedelta(seconds=61))
    assert last_seen() == T0 + timedelta(seconds=61)


def test_a_cookie_without_a_session_id_is_anonymous(db: Session, ada: User) -> None:
    # What a cookie of the earlier, stateless kind held: it signs nobody in now.
    assert signed_in_user(db, {"uid": ada.id, "pv": "0" * 16, "csrf": "x"}, T0) is None
    assert signed_in_user(db, {SESSION_KEY: "made-up"}, T0) is None


def test_purge_deletes_expired_sessions_and_failures_that_no_longer_count(
    db: Session, ada: User
) -> None:
    live = _signed_in(db, ada)
    _signed_in(db, ada, now=T0 - timedelta(seconds=MAX_AGE_S))  # expires exactly at T0
    record_failure(db, "ada", "192.0.2.1", T0 - timedelta(minutes=15))
    record_failure(db, "ada", "192.0.2.1", T0 - timedelta(minutes=14))
    db.commit()
    settings = Settings(database_url="sqlite://", ui=UISettings(sign_in_failure_window_s=900))
    assert purge_expired(db, T0, settings) == (1, 1)
    db.commit()
    assert signed_in_user(db, live, T0) == ada
    assert len(db.scalars(select(SignInFailure)).all()) == 1
