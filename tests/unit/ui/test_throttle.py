"""The sign-in rate limit's counting, on a real (SQLite) database built by the migrations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from backend.auth.models import SignInFailure
from backend.auth.throttle import (
    Lockout,
    SignInLimits,
    clear_failures,
    lockout,
    record_failure,
)
from backend.settings import UISettings

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
LIMITS = SignInLimits(per_user=5, per_ip=20, window=timedelta(minutes=15))
HERE, ELSEWHERE = "198.51.100.7", "203.0.113.9"


def _fail(db: Session, username: str, n: int, at: datetime = T0, ip: str = HERE) -> None:
    for i in range(n):
        record_failure(db, username, ip, at + timedelta(seconds=i))
    db.commit()


def test_limits_come_from_the_settings() -> None:
    ui = UISettings(
        sign_in_max_failures_per_user=3, sign_in_max_failures_per_ip=7, sign_in_failure_window_s=60
    )
    assert SignInLimits.from_settings(ui) == SignInLimits(3, 7, timedelta(seconds=60))
    assert SignInLimits.from_settings(UISettings()) == LIMITS


def test_the_user_limit_locks_after_the_fifth_failure_until_the_window_passes(
    db: Session,
) -> None:
    _fail(db, "ada", 4)
    assert lockout(db, "ada", HERE, T0 + timedelta(seconds=10), LIMITS) is None
    _fail(db, "ada", 1, at=T0 + timedelta(seconds=10))
    # From anywhere: the guesses are about the name.
    locked = lockout(db, "ada", ELSEWHERE, T0 + timedelta(seconds=10), LIMITS)
    assert locked == Lockout(15 * 60 - 10)  # until the oldest of the five is 15 min old
    assert locked.message == "Too many failed sign-ins; try again in 15 minutes."
    assert lockout(db, "eddie", HERE, T0 + timedelta(seconds=10), LIMITS) is None
    # The lock lifts when the oldest failure leaves the window, not a moment before.
    lifts = T0 + timedelta(minutes=15)
    assert lockout(db, "ada", HERE, lifts - timedelta(seconds=1), LIMITS) == Lockout(1)
    assert lockout(db, "ada", HERE, lifts, LIMITS) is None


def test_retry_after_rounds_up_to_whole_minutes_in_the_message() -> None:
    assert Lockout(1).message == "Too many failed sign-ins; try again in 1 minute."
    assert Lockout(61).minutes == 2
    assert Lockout(900).minutes == 15


def test_the_address_limit_counts_failures_for_any_name(db: Session) -> None:
    for i in range(19):
        _fail(db, f"guess-{i}", 1)
    assert lockout(db, "ada", HERE, T0, LIMITS) is None
    _fail(db, "guess-19", 1)
    assert lockout(db, "ada", HERE, T0 + timedelta(seconds=1), LIMITS) is not None
    assert lockout(db, "ada", ELSEWHERE, T0 + timedelta(seconds=1), LIMITS) is None


def test_success_clears_the_users_failures_but_not_the_addresss(db: Session) -> None:
    _fail(db, "ada", 5)
    _fail(db, "other", 15)
    assert lockout(db, "ada", ELSEWHERE, T0, LIMITS) is not None
    clear_failures(db, "ada")
    db.commit()
    assert lockout(db, "ada", ELSEWHERE, T0, LIMITS) is None
    assert db.scalars(select(SignInFailure.username).distinct()).all() == ["other"]


def test_overlong_names_and_addresses_are_cut_to_the_columns(db: Session) -> None:
    long_name, long_address = "x" * 500, "y" * 500
    _fail(db, long_name, 5, ip=long_address)
    assert lockout(db, long_name, long_address, T0, LIMITS) is not None


def test_simultaneous_wrong_passwords_on_sqlite_reach_the_check_at_most_the_limit(
    db: Session,
) -> None:
    """The embedded mode's path of the atomic limit: attempts on one name take turns."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    from sqlalchemy.orm import sessionmaker

    from backend.auth.service import create_user
    from backend.auth.sessions import Client, attempt_sign_in

    create_user(db, "ada", "correct-horse-battery", "admin")
    db.commit()
    factory = sessionmaker(db.get_bind(), expire_on_commit=False)
    n = 16
    barrier = Barrier(n)

    def guess(_: int) -> str:
        barrier.wait()
        with factory() as session:
            result = attempt_sign_in(
                session,
                {},
                "ada",
                "a wrong guess",
                now=T0,
                limits=LIMITS,
                max_age_s=3600,
                client=Client(None, HERE),
            )
        return "locked" if result.lockout is not None else "checked"

    with ThreadPoolExecutor(n) as pool:
        outcomes = list(pool.map(guess, range(n)))
    assert outcomes.count("checked") == LIMITS.per_user
    assert outcomes.count("locked") == n - LIMITS.per_user
    recorded = db.scalars(select(SignInFailure).where(SignInFailure.username == "ada")).all()
    assert len(recorded) == LIMITS.per_user
