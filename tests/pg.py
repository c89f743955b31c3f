"""Helpers to build throw-away PostgreSQL databases on the test server."""

from __future__ import annotations

import psycopg
from sqlalchemy.engine import make_url


def _admin_conninfo(url: str) -> tuple[str, str]:
    u = make_url(url)
    name = u.database or "headroom_test"
    admin = u.set(drivername="postgresql", database="postgres")
    return admin.render_as_string(hide_password=False), name


def recreate_database(url: str) -> None:
    """Drop and create the database named in `url` (it is a test database by contract)."""
    conninfo, name = _admin_conninfo(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def database_url_variant(url: str, suffix: str) -> str:
    u = make_url(url)
    return u.set(database=f"{u.database}_{suffix}").render_as_string(hide_password=False)
