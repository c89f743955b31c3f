"""The console's sign-in rate limit: failed sign-ins counted per username and per client address.

Failures are rows of `sign_in_failures`, so every API replica counts the same ones. Past the
limit, a sign-in is refused before its password is looked at: guessing gets no answer while
locked, and the (deliberately expensive) argon2 verification is not spent on a flood.

A refused attempt is not recorded: the lock lifts `window` after the failures that caused it,
however often someone keeps trying meanwhile, and the table grows by at most the limits per
window and key.

Checking, verifying and recording are one atomic step per username (`one_at_a_time`): on
PostgreSQL a transaction-scoped advisory lock on the name, held until the attempt's commit, so
that a simultaneous burst on every replica reaches the password check at most `per_user`
times; on SQLite (the embedded mode: one process) a lock of the process. Attempts on different
names from one address are not serialized (an office behind one address must not queue), so
the per-address limit can be passed by a few during a simultaneous burst.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, delete, func, select
from sqlalchemy.orm import Session

from backend.auth.models import SignInFailure
from backend.settings import UISettings

# Column widths of `sign_in_failures`: a longer username cannot exist (users.username is 63
# wide) and a longer "address" is not an IP; cutting them keeps inserts valid on PostgreSQL.
USERNAME_WIDTH = 63
ADDRESS_WIDTH = 64


@dataclass(frozen=True)
class SignInLimits:
    per_user: int
    per_ip: int
    window: timedelta

    @classmethod
    def from_settings(cls, ui: UISettings) -> SignInLimits:
        return cls(
            per_user=ui.sign_in_max_failures_per_user,
            per_ip=ui.sign_in_max_failures_per_ip,
            window=timedelta(seconds=ui.sign_in_failure_window_s),
        )


@dataclass(frozen=True)
class Lockout:
    """Sign-ins for this username or from this address are refused for `retry_after_s` more."""

    retry_after_s: int

    @property
    def minutes(self) -> int:
        return max(1, math.ceil(self.retry_after_s / 60))

    @property
    def message(self) -> str:
        unit = "minute" if self.minutes == 1 else "minutes"
        return f"Too many failed sign-ins; try again in {self.minutes} {unit}."


# SQLite: a fixed set of locks shared by hashing the name, so that a spray of names cannot grow
# a table of locks without bound.
_LOCAL_LOCKS = tuple(threading.Lock() for _ in range(64))


@contextmanager
def one_at_a_time(db: Session, username: str) -> Iterator[None]:
    """Sign-in attempts for `username` take turns until the attempt's transaction ends.

    The caller commits inside the block; on PostgreSQL the lock is the transaction's and ends
    with it, on SQLite the block holds the process's lock until the commit is done.
    """
    if db.get_bind().dialect.name == "postgresql":
        key = f"headroom:sign-in:{_username(username)}"
        db.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))
        yield
        return
    with _LOCAL_LOCKS[zlib.crc32(username.encode()) % len(_LOCAL_LOCKS)]:
        yield


def _username(value: str) -> str:
    return value[:USERNAME_WIDTH]


def _address(value: str) -> str:
    return value[:ADDRESS_WIDTH]


def _unlocks_at(
    db: Session, key: ColumnElement[bool], limit: int, now: datetime, window: timedelta
) -> datetime | None:
    """When the failures matching `key` fall back under `limit`, or None if they are already.

    Locked means at least `limit` failures within the window; the lock lifts when the
    limit-th newest of them leaves it. One indexed read: that failure's time, if there is one.
    """
    nth_newest = db.scalar(
        select(SignInFailure.at)
        .where(key, SignInFailure.at > now - window)
        .order_by(SignInFailure.at.desc())
        .offset(limit - 1)
        .limit(1)
    )
    return None if nth_newest is None else nth_newest + window


def lockout(
    db: Session, username: str, client_ip: str, now: datetime, limits: SignInLimits
) -> Lockout | None:
    """Whether a sign-in for `username` from `client_ip` must be refused right now."""
    ends = [
        end
        for end in (
            _unlocks_at(
                db,
                SignInFailure.username == _username(username),
                limits.per_user,
                now,
                limits.window,
            ),
            _unlocks_at(
                db,
                SignInFailure.client_ip == _address(client_ip),
                limits.per_ip,
                now,
                limits.window,
            ),
        )
        if end is not None
    ]
    if not ends:
        return None
    return Lockout(max(1, math.ceil((max(ends) - now).total_seconds())))


def record_failure(db: Session, username: str, client_ip: str, now: datetime) -> None:
    db.add(SignInFailure(username=_username(username), client_ip=_address(client_ip), at=now))
    db.flush()


def clear_failures(db: Session, username: str) -> None:
    """A successful sign-in forgives that username's failures (not the address's: one right
    password must not reset a spray of guesses at other names from the same place)."""
    db.execute(delete(SignInFailure).where(SignInFailure.username == _username(username)))


def purge_failures(db: Session, now: datetime, window: timedelta) -> int:
    """Delete the failures that no longer count; how many."""
    result = db.execute(delete(SignInFailure).where(SignInFailure.at <= now - window))
    return int(result.rowcount)  # type: ignore[attr-defined]
