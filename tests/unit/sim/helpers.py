"""Short simulations over slices of the shipped traces, with the invariants checked as they run."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from backend.scheduling.types import TransferConfig
from backend.sim.engine import SimConfig, SimResult, Simulation
from backend.sim.gpu import load_profile
from backend.sim.pool import build_pool
from backend.sim.routers import make_policy
from backend.sim.server import Done, Outcome, Request, Seq, Server
from backend.sim.traces import load_trace
from backend.sim.view import RouterView, Slo

SLO = Slo(2000.0, 100.0)


def view(interval: float) -> RouterView:
    """A router's view of one idle ``a100-llama3-8b`` pod, scraped every ``interval`` s."""
    spec = build_pool(1, "a100-llama3-8b")[0]
    server = Server(0, spec.name, load_profile(spec.profile))
    return RouterView([server], SLO, random.Random(0), TransferConfig(), scrape_interval_s=interval)


def enqueue_at(v: RouterView, t: float, requests: int) -> None:
    """``requests`` 4,000-token prompts reach the view's pod at ``t``."""
    for rid in range(requests):
        v.servers[0].enqueue(Seq(Request(rid, t, 4000, 50, [], 0)), t)


@dataclass
class Checked:
    result: SimResult
    done_count: Counter[int] = field(default_factory=Counter)
    first_count: Counter[int] = field(default_factory=Counter)
    max_used_fraction: float = 0.0
    sim: Simulation | None = None


def check_server(server: Server) -> None:
    kv = server.kv
    kv.check()
    assert kv.used <= kv.capacity
    private = sum(s.private for s in server.running)
    assert kv.used == private + kv.referenced_blocks()
    assert len(server.running) <= server.max_seqs


def run_checked(
    policy: str = "least-request",
    *,
    n: int = 300,
    load: float = 1.0,
    pods: int = 4,
    gpu: str = "a100-llama3-8b",
    pd: str | None = None,
    layout: str = "rack",
    trace: str = "mooncake-conversation",
    seed: int = 0,
) -> Checked:
    pool = build_pool(pods, gpu, pd, layout)
    fabric = TransferConfig(kv_bytes_per_token=load_profile(pool[0].profile).kv_bytes_per_token)
    sim = Simulation(
        load_trace(trace).head(n).scaled(load),
        pool,
        make_policy(policy, fabric, seed),
        SimConfig(SLO, seed=seed, transfer=fabric),
    )
    checked = Checked(result=None, sim=sim)  # type: ignore[arg-type]
    for server in sim.servers:
        advance = server.advance

        def wrapped(now: float, out: list[Outcome], server: Server = server, advance=advance):  # type: ignore[no-untyped-def]
            start = len(out)
            nxt = advance(now, out)
            check_server(server)
            used = server.kv.used / server.kv.capacity
            checked.max_used_fraction = max(checked.max_used_fraction, used)
            for o in out[start:]:
                if isinstance(o, Done):
                    checked.done_count[o.seq.req.rid] += 1
            return nxt

        server.advance = wrapped  # type: ignore[method-assign]
    checked.result = sim.run()
    return checked
