"""Training locks: two trainers never fit the same (pool, target) at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Protocol

import redis
from redis.exceptions import LockError


class Locks(Protocol):
    def hold(self, key: str) -> AbstractContextManager[bool]:
        """Try to take the lock without waiting; the context value says whether it was taken."""
        ...


class LocalLocks:
    """In-process locks for the embedded mode."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def hold(self, key: str) -> Iterator[bool]:
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        acquired = lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()


class RedisLocks:
    """Redis locks with an expiry, so a worker killed mid-training cannot block a target forever."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self._client = redis.Redis.from_url(url)
        self._timeout = timeout_s

    @contextmanager
    def hold(self, key: str) -> Iterator[bool]:
        lock = self._client.lock(f"headroom:lock:{key}", timeout=self._timeout, blocking=False)
        acquired = bool(lock.acquire())
        try:
            yield acquired
        finally:
            if acquired:
                # Expired while training: someone else may hold it now, and that is theirs.
                with suppress(LockError):
                    lock.release()
