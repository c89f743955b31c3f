"""After-commit effects run once the write is committed, and never when it is rolled back."""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, String, create_engine, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from backend.exceptions import Conflict
from backend.transactions import after_commit, write


class _Base(DeclarativeBase):
    pass


class _Row(_Base):
    __tablename__ = "rows"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(10), unique=True)


@pytest.fixture
def session() -> Session:
    engine = create_engine("sqlite://")
    _Base.metadata.create_all(engine)
    return Session(engine)


def test_an_effect_runs_after_the_commit_and_sees_the_committed_row(session: Session) -> None:
    seen: list[int] = []

    def count_committed() -> None:
        # A separate connection: only a committed row is visible to it.
        with session.get_bind().connect() as conn:  # type: ignore[union-attr]
            seen.append(conn.execute(text("SELECT count(*) FROM rows")).scalar_one())

    with write(session):
        session.add(_Row(name="a"))
        after_commit(session, count_committed)
        assert seen == []
    assert seen == [1]


def test_an_effect_is_discarded_when_the_write_fails(session: Session) -> None:
    ran: list[str] = []
    with pytest.raises(ValueError), write(session):
        session.add(_Row(name="a"))
        after_commit(session, lambda: ran.append("rolled back"))
        raise ValueError("refused")
    # The next unit of work on the same session does not inherit it.
    with write(session):
        after_commit(session, lambda: ran.append("next"))
    assert ran == ["next"]


def test_a_released_savepoint_is_not_the_commit(session: Session) -> None:
    ran: list[str] = []
    with write(session):
        after_commit(session, lambda: ran.append("done"))
        with session.begin_nested():
            session.add(_Row(name="a"))
        assert ran == []
    assert ran == ["done"]


def test_a_unique_key_lost_to_another_writer_is_a_conflict(session: Session) -> None:
    with write(session):
        session.add(_Row(name="a"))
    ran: list[str] = []
    with pytest.raises(Conflict, match="taken"), write(session, conflict="taken"):
        session.add(_Row(name="a"))
        after_commit(session, lambda: ran.append("never"))
    assert ran == []
    assert session.query(_Row).count() == 1
