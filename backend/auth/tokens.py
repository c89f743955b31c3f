"""Bearer tokens resolved to actors, cached briefly for the data plane's sake."""

from __future__ import annotations

import hashlib
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from backend.auth.service import Actor, actor_for_token


class TokenCache:
    """Resolved tokens for `ttl_s`, so that data-plane calls do not each query the database.

    A revoked token or disabled user stops working within `ttl_s`.
    """

    def __init__(self, sessions: sessionmaker[Session], ttl_s: float = 5.0) -> None:
        self._sessions = sessions
        self._ttl = ttl_s
        self._entries: dict[str, tuple[float, Actor | None]] = {}
        self._lock = threading.Lock()

    def resolve(self, clear: str) -> Actor | None:
        key = hashlib.sha256(clear.encode()).hexdigest()
        hit = self._entries.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        with self._sessions() as session:
            actor = actor_for_token(session, clear)
        with self._lock:
            if len(self._entries) > 10_000:  # bounded: garbage tokens must not grow memory
                self._entries.clear()
            self._entries[key] = (time.monotonic() + self._ttl, actor)
        return actor
