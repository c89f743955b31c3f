"""'A model was activated' notifications: Redis pub/sub between processes, a callback in-process.

Every API replica listens and reloads its in-memory models within a second; the periodic poll
in `backend/registry/sync.py` is the fallback should a message be lost (pub/sub is not durable).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import redis

log = logging.getLogger("headroom.notify")

CHANNEL = "headroom:models"


class Notifier(Protocol):
    def publish(self, event: dict[str, Any]) -> None: ...


class LocalNotifier:
    """The embedded mode: trainer and server share a process, so a call is the message."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[dict[str, Any]], object]] = []

    def subscribe(self, listener: Callable[[dict[str, Any]], object]) -> None:
        self._listeners.append(listener)

    def publish(self, event: dict[str, Any]) -> None:
        for listener in self._listeners:
            listener(event)


class RedisNotifier:
    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)

    def publish(self, event: dict[str, Any]) -> None:
        # Best effort: with Redis down the activation is still committed, and every replica's
        # poll picks it up; failing the caller here would only lose the answer.
        try:
            self._client.publish(CHANNEL, json.dumps(event))
        except redis.RedisError as exc:
            log.warning("could not announce model %s: %s", event.get("version_id"), exc)


class RedisListener:
    """A daemon thread that calls `on_event` for each message, reconnecting after failures."""

    def __init__(self, url: str, on_event: Callable[[dict[str, Any]], object]) -> None:
        self._url = url
        self._on_event = on_event
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="model-listener", daemon=True)

    def start(self) -> RedisListener:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                client = redis.Redis.from_url(self._url, socket_keepalive=True)
                with client.pubsub(ignore_subscribe_messages=True) as pubsub:  # type: ignore[no-untyped-call]
                    pubsub.subscribe(CHANNEL)
                    while not self._stop.is_set():
                        message = pubsub.get_message(timeout=0.5)
                        if message is not None:
                            self._on_event(json.loads(message["data"]))
                client.close()
            except Exception:  # Redis down or a bad message: the poll covers us meanwhile
                log.warning("model notifications interrupted; retrying", exc_info=True)
                self._stop.wait(1.0)
