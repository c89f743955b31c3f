"""Pools: lookups are cached because every data-plane call resolves a pool name."""

from __future__ import annotations

import re
import threading

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from backend.auth.service import Actor
from backend.exceptions import Conflict, NotFound
from backend.policies.schemas import PolicySpec
from backend.policies.service import create_policy
from backend.pools.models import DEFAULT_POOL, Pool
from backend.pools.schemas import POOL_NAME_PATTERN, PoolCreate
from backend.transactions import write


class PoolNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown pool {name!r}")
        self.name = name


class PoolExists(Conflict):
    def __init__(self, name: str) -> None:
        super().__init__(f"pool {name!r} already exists")


_POOL_NAME = re.compile(POOL_NAME_PATTERN)


def _named(name: str) -> str:
    """A name no pool can have (a NUL byte, a slash, too long) is unknown without asking the
    database, which would refuse some of them with an error instead of an empty answer."""
    if _POOL_NAME.fullmatch(name) is None:
        raise PoolNotFound(name)
    return name


class PoolCache:
    """Name -> id. Pool ids never change once created, so positive entries never go stale."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def cached(self, name: str) -> int | None:
        """The id if already known, without touching the database (hot paths)."""
        return self._ids.get(name)

    def resolve(self, session: Session, name: str) -> int:
        pool_id = self._ids.get(name)
        if pool_id is not None:
            return pool_id
        pool_id = session.scalar(select(Pool.id).where(Pool.name == _named(name)))
        if pool_id is None:
            raise PoolNotFound(name)
        with self._lock:
            self._ids[name] = pool_id
        return pool_id


def list_pools(session: Session) -> list[Pool]:
    return list(session.scalars(select(Pool).order_by(Pool.id)))


def get_pool(session: Session, name: str) -> Pool:
    pool = session.scalar(select(Pool).where(Pool.name == _named(name)))
    if pool is None:
        raise PoolNotFound(name)
    return pool


def create_pool(session: Session, data: PoolCreate) -> Pool:
    pool = Pool(name=data.name, description=data.description)
    session.add(pool)
    try:
        with session.begin_nested():
            session.flush()
    except IntegrityError as exc:
        raise PoolExists(data.name) from exc
    return pool


def add_pool(session: Session, data: PoolCreate, actor: Actor) -> Pool:
    """Create a pool with a new pool's default policy, `PolicySpec()` (POST /v1/pools)."""
    with write(session, conflict=f"pool {data.name!r} already exists"):
        pool = create_pool(session, data)
        create_policy(session, pool.id, PolicySpec(), actor.name)
    return pool


def ensure_default_pool(session: Session) -> None:
    if session.scalar(select(Pool.id).where(Pool.name == DEFAULT_POOL)) is None:
        session.add(Pool(name=DEFAULT_POOL, description="The pool served at the root paths."))
