"""One saturation computation for every API replica (production mode: Redis).

Why: each API replica serves saturation from its own memory, and each one's helper process
(``backend/capacity/helper.py``) would compute every pool's level: N replicas, N times the
CPU for the same answer (a 100-pod pool's tick is most of a second of a core). The helpers
elect one instead, with a Redis lock that expires (``3 x interval_s``) and that the leader
renews every tick: the leader computes and stores each tick's reports in Redis, the others
read them there, and each replica's API process serves what its helper hands it. A leader that
dies stops renewing; when its lock expires the next helper to ask takes it and computes from
then on, its monitor starting afresh.

Reports are stored as JSON: what a process reads from Redis is data, never code (pickle).
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

import orjson
import redis
from redis.exceptions import LockError

from backend.capacity.service import PoolReport
from backend.scheduling.saturation import Headroom, PodLevel, Saturation

LEADER_KEY = "headroom:capacity:leader"
REPORTS_KEY = "headroom:capacity:reports"

Tick = tuple[dict[str, PoolReport], datetime]


def encode(reports: dict[str, PoolReport], now: datetime, leader: str) -> bytes:
    return orjson.dumps(
        {"now": now, "leader": leader, "reports": [asdict(r) for r in reports.values()]}
    )


def decode(raw: bytes | str) -> tuple[dict[str, PoolReport], datetime, str]:
    """The reports, when they were computed and by which helper (``host:pid``)."""
    body = orjson.loads(raw)
    reports = [_report(r) for r in body["reports"]]
    return {r.pool: r for r in reports}, datetime.fromisoformat(body["now"]), body["leader"]


def _known(cls: Any, d: dict[str, Any]) -> dict[str, Any]:
    """``d``'s fields that ``cls`` has: a report from a newer leader (a rolling upgrade) may
    carry fields this version does not know, and is still read."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def _report(d: dict[str, Any]) -> PoolReport:
    sat = d["saturation"]
    return PoolReport(
        **{
            **_known(PoolReport, d),
            "computed_at": datetime.fromisoformat(d["computed_at"]),
            "saturation": None if sat is None else _saturation(sat),
            "stale_pods": tuple(d["stale_pods"]),
        }
    )


def _saturation(d: dict[str, Any]) -> Saturation:
    return Saturation(
        **{
            **_known(Saturation, d),
            "pods": tuple(PodLevel(**_known(PodLevel, p)) for p in d["pods"]),
            "p50": Headroom(**_known(Headroom, d["p50"])),
            "p90": Headroom(**_known(Headroom, d["p90"])),
        }
    )


class Election:
    """This helper's standing among the replicas' helpers, and the reports they share."""

    def __init__(self, url: str, interval_s: float) -> None:
        self._client = redis.Redis.from_url(url)
        self._ttl_s = 3.0 * interval_s  # a leader late by two ticks still holds it
        self._lock = self._client.lock(LEADER_KEY, timeout=self._ttl_s, blocking=False)
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def lead(self) -> bool:
        """Whether this helper computes this tick: it holds the lock (renewed now) or took it."""
        try:
            if self._lock.owned():
                self._lock.reacquire()
                return True
            return bool(self._lock.acquire())
        except LockError:  # expired between the check and the renewal: another may hold it
            return False

    def publish(self, reports: dict[str, PoolReport], now: datetime) -> None:
        raw = encode(reports, now, self.name)
        self._client.set(REPORTS_KEY, raw, px=int(self._ttl_s * 1000))

    def read(self) -> Tick | None:
        """The leader's last tick, None when there is none (no leader yet, or it died)."""
        raw = self._client.get(REPORTS_KEY)
        if raw is None:
            return None
        reports, now, _ = decode(raw)
        return reports, now

    def close(self) -> None:
        """On the way out: a leader hands over at once (the next helper to ask takes the lock,
        not after its expiry) and takes its reports with it (no helper hands them on after)."""
        if self._lock.owned():
            self._client.delete(REPORTS_KEY)
            self._lock.release()
        self._client.close()
