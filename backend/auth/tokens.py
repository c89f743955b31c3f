"""Bearer tokens resolved to actors, cached briefly for the data plane's sake."""

from __future__ import annotations

import hashlib
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from backend.auth.service import Actor, actor_for_token


def _key(clear: str) -> str:
    return hashlib.sha256(clear.encode()).hexdigest()


class TokenCache:
    """Resolved tokens for `ttl_s`, so that data-plane calls do not each query the database.

    A revoked token or disabled user stops working within `ttl_s`.
    """

    def __init__(self, sessions: sessionmaker[Session], ttl_s: float = 5.0) -> None:
        self._sessions = sessions
        self._ttl = ttl_s
        self._entries: dict[str, tuple[float, Actor | None]] = {}
        self._lock = threading.Lock()

    def cached(self, clear: str) -> tuple[bool, Actor | None]:
        """(found, actor) without touching the database: the event loop's fast path."""
        hit = self._entries.get(_key(clear))
        if hit is not None and hit[0] > time.monotonic():
            return True, hit[1]
        return False, None

    def resolve(self, clear: str) -> Actor | None:
        found, actor = self.cached(clear)
        if found:
            return actor
        key = _key(clear)
        with self._sessions() as session:
            actor = actor_for_token(session, clear)
        with self._lock:
            if len(self._entries) > 10_000:  # bounded: garbage tokens must not grow memory
                self._entries.clear()
            self._entries[key] = (time.monotonic() + self._ttl, actor)
        return actor
