"""What the simulated router reads of a pod: scraped gauges, or (measurement only) the present."""

from __future__ import annotations

import random

from backend.scheduling.types import TransferConfig
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.server import Request, Seq, Server
from backend.sim.view import RouterView

from .helpers import SLO


def view(interval: float) -> RouterView:
    spec = build_pool(1, "a100-llama3-8b")[0]
    server = Server(0, spec.name, load_profile(spec.profile))
    return RouterView([server], SLO, random.Random(0), TransferConfig(), scrape_interval_s=interval)


def enqueue_at(v: RouterView, t: float, requests: int) -> None:
    for rid in range(requests):
        v.servers[0].enqueue(Seq(Request(rid, t, 4000, 50, [], 0)), t)


def test_a_scrape_shows_the_pod_as_it_stood_at_the_last_scrape() -> None:
    v = view(0.05)
    v.phases = [0.0]
    enqueue_at(v, 0.101, 3)
    v.now = 0.12  # last scrape at 0.10, before the arrivals
    assert v.scraped(0).num_running + v.scraped(0).num_waiting == 0
    v.now = 0.151
    assert v.scraped(0).num_running + v.scraped(0).num_waiting == 3


def test_interval_zero_reads_the_present_gauges() -> None:
    v = view(0.0)
    enqueue_at(v, 0.101, 3)
    v.now = 0.101
    present = v.servers[0].metrics()
    assert v.scraped(0) == present
    assert present.num_running + present.num_waiting == 3
