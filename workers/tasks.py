"""Celery tasks: each one a thin wrapper over a backend service function."""

from __future__ import annotations

from functools import cache

from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.samples.service import trim_all_windows
from backend.settings import Settings

TRIM_WINDOWS = "headroom.trim_windows"


@cache
def _sessions(database_url: str) -> sessionmaker[Session]:
    # One engine per worker process, made on first use (after the fork, never at import).
    return make_sessionmaker(make_engine(database_url))


def register(app: Celery, settings: Settings) -> None:
    @app.task(name=TRIM_WINDOWS)  # type: ignore[untyped-decorator]
    def trim_windows() -> int:
        """Bring every window back to its per-bucket cap."""
        with unit_of_work(_sessions(settings.database_url)) as session:
            return trim_all_windows(session, settings.window.cap)
