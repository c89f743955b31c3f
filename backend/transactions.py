"""One write operation, one transaction: committed by the service that owns the operation.

The rule (docs/architecture.md): a service function that changes rows runs them in
`write(session)`, which commits when the block succeeds and rolls back when it raises. What
must follow a write (the routing policy cache dropped, replicas told about a new model) is
registered with `after_commit` and runs only once the commit succeeded; a rollback discards it.
A unique key that a concurrent writer won (`IntegrityError`) is a `Conflict` (409), never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from sqlalchemy import event
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, SessionTransaction

from backend.exceptions import Conflict

log = logging.getLogger("headroom.transactions")

_EFFECTS = "headroom.after_commit"

Effect = Callable[[], None]


class Invalidates(Protocol):
    """A cache of rows that a write must drop (e.g. routing's PolicyCache)."""

    def invalidate(self) -> None: ...


def after_commit(session: Session, effect: Effect) -> None:
    """Run `effect` once the session's current transaction commits; never if it rolls back."""
    if not event.contains(session, "after_commit", _run_effects):
        event.listen(session, "after_commit", _run_effects)
        event.listen(session, "after_transaction_end", _discard_effects)
    session.info.setdefault(_EFFECTS, []).append(effect)


def _run_effects(session: Session) -> None:
    if session.in_nested_transaction():  # a savepoint released: the real commit is later
        return
    effects: list[Effect] = session.info.pop(_EFFECTS, [])
    for effect in effects:
        effect()


def _discard_effects(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # the outermost transaction ended without a commit
        session.info.pop(_EFFECTS, None)


@contextmanager
def write(session: Session, *, conflict: str = "a concurrent change won") -> Iterator[Session]:
    """The unit of work of one write operation: commit on success, roll back on error; a
    unique-key violation (two writers racing for the same name or version) is `Conflict`."""
    try:
        yield session
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        log.info("write refused by a constraint: %s", exc.orig)
        raise Conflict(conflict) from None
    except BaseException:
        session.rollback()
        raise
