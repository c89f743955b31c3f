"""Saturation computed in a helper process of the API process.

Why: a tick is Python and numpy over every pod and representative request (about 0.8 s of one
core for a 100-pod pool with the next interval replayed, ``bench/saturation.py``). In a thread
of the API process it holds the GIL for most of that, and every prediction answered meanwhile
waits for it: `/predict/bulk/strict`'s p99 was 31.3 ms with the tick in a thread against 15.1
ms with it here (``bench/saturation.py --rounds 3``; docs/capacity.md, "Cost"). The helper
runs the same ``CapacityMonitor`` on its own database connection and its own copy of the
served models, at a lower CPU priority than the API, and sends each tick's reports over a
pipe; the API process's monitor serves them (``publish``), reading the desired replicas
itself. Requests and scrapes still read memory.

A helper that dies is started again; until its first tick the API serves the last reports it
received. With several API replicas (Redis) one helper computes for all of them
(``backend/capacity/shared.py``). ``capacity.helper_process = false`` computes in a thread of
the API process instead.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
import time
from datetime import datetime
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from backend import logs
from backend.capacity.service import CapacityMonitor
from backend.capacity.shared import Election, Tick
from backend.children import exit_with_parent
from backend.db import dispose, make_engine, make_sessionmaker
from backend.predictor.serving import ModelStore
from backend.registry.sync import StoreSync
from backend.routing.service import PolicyCache
from backend.settings import Settings

log = logging.getLogger("headroom.capacity")

NICENESS = 10
"""How much lower the helper's CPU priority is than the API's: where both want a core, the
predictions win it (a tick is late by milliseconds; a prediction must answer in about one)."""
_RESTART_S = 5.0  # after a helper died, before the next one starts (no busy restart loop)


def run(settings: Settings, conn: Connection) -> None:
    """The helper process: tick every ``capacity.interval_s`` (the first at once) until the
    API process says stop or goes away. With Redis and ``capacity.shared``, only the replicas'
    elected helper computes; the others hand on its reports (``backend/capacity/shared.py``)."""
    exit_with_parent()  # a tick or the imports do not wait for the pipe's end of file
    logs.configure(settings.log_level)
    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    store = ModelStore()
    sync = StoreSync(sessions, store)
    # Edits made through the API reach this process within the cache's time to live.
    policies = PolicyCache(sessions)

    def monitor() -> CapacityMonitor:
        return CapacityMonitor(sessions, store, policies.get, settings.capacity)

    interval = settings.capacity.interval_s
    election = (
        Election(settings.redis_url, interval)
        if settings.redis_url is not None and settings.capacity.shared
        else None
    )
    computing: CapacityMonitor | None = None
    sent: datetime | None = None
    try:
        while True:
            started = time.monotonic()
            tick: Tick | None = None
            try:
                if election is None or election.lead():
                    # A helper that just took the lead reads from the newest samples, not from
                    # where it stopped when it last led.
                    if computing is None:
                        computing = monitor()
                    sync()  # the models activated since the last tick
                    reports, now, _ = computing.compute()
                    if election is not None:
                        election.publish(reports, now)
                    tick = (reports, now)
                else:
                    computing = None
                    tick = election.read()
            except Exception:  # a failed tick must not end the helper; the next one retries
                log.exception("saturation tick failed")
            if tick is not None and tick[1] != sent:  # a leader's tick is handed on once
                try:
                    conn.send(tick)
                except (BrokenPipeError, EOFError, OSError):
                    return  # the API process went away
                sent = tick[1]
            if conn.poll(max(0.0, interval - (time.monotonic() - started))):
                return  # asked to stop, or the API process went away (end of file)
    finally:
        if election is not None:
            with contextlib.suppress(Exception):  # Redis gone: the lock expires by itself
                election.close()
        dispose(engine)


class CapacityHelper:
    """The API process's side: starts the helper, serves what it sends, restarts it if it
    dies, stops it with the process."""

    def __init__(self, settings: Settings, monitor: CapacityMonitor) -> None:
        self._settings = settings
        self._monitor = monitor
        self._stop = threading.Event()
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._thread = threading.Thread(target=self._serve, name="capacity-helper", daemon=True)

    def start(self) -> CapacityHelper:
        self._thread.start()
        return self

    def _spawn(self) -> Connection:
        # spawn, not fork: the API process already runs threads, whose held locks a fork copies.
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=True)
        process = context.Process(
            target=run, args=(self._settings, theirs), name="headroom-capacity", daemon=True
        )
        process.start()
        # Lowered from here, at once: before the child has even imported what it runs.
        assert process.pid is not None  # set by start(); 0 would lower this process
        os.setpriority(os.PRIO_PROCESS, process.pid, NICENESS)
        theirs.close()  # the child holds its end; ours sees end of file when the child exits
        self._process, self._conn = process, ours
        return ours

    def _serve(self) -> None:
        while not self._stop.is_set():
            conn = self._spawn()
            if self._stop.is_set():  # stop() came while this one started: it may have missed it
                with contextlib.suppress(OSError):
                    conn.send("stop")
            try:
                while True:
                    reports, now = conn.recv()
                    try:
                        self._monitor.publish(reports, now)
                    except Exception:  # the database, for the desired replicas: next tick
                        log.exception("serving the saturation helper's tick failed")
            except (EOFError, OSError):
                pass  # the helper exited
            finally:
                self._reap()
            if not self._stop.is_set():
                log.error("the saturation helper exited; starting another")
                self._stop.wait(_RESTART_S)

    def _reap(self) -> None:
        process, conn = self._process, self._conn
        if conn is not None:
            conn.close()
        if process is not None:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(OSError):  # already gone
                conn.send("stop")  # the helper's poll wakes and it exits after its tick
        self._thread.join(timeout=30)

    @property
    def pid(self) -> int | None:
        """The running helper's process id (None before it started)."""
        process = self._process
        return process.pid if process is not None else None
