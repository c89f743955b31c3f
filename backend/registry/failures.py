"""Counting failed trainings where every API process can read them for /metrics: a Redis hash
in production (workers train elsewhere), a dict in the embedded mode."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import redis

log = logging.getLogger("headroom.failures")

KEY = "headroom:training_failures"


class FailureCounter(Protocol):
    def incr(self, field: str) -> None: ...

    def read(self) -> dict[str, int]: ...


class LocalFailures:
    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def incr(self, field: str) -> None:
        with self._lock:
            self._counts[field] = self._counts.get(field, 0) + 1

    def read(self) -> dict[str, int]:
        return dict(self._counts)


class RedisFailures:
    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url, socket_timeout=2)

    def incr(self, field: str) -> None:
        try:
            self._client.hincrby(KEY, field, 1)
        except redis.RedisError as exc:  # the failure itself is logged by the trainer
            log.warning("could not count a training failure: %s", exc)

    def read(self) -> dict[str, int]:
        try:
            raw = self._client.hgetall(KEY)
        except redis.RedisError:
            return {}
        return {k.decode(): int(v) for k, v in raw.items()}  # type: ignore[union-attr]
