"""One model-server pod: vLLM V1's scheduler with chunked prefill, in macro steps.

Each iteration follows ``Scheduler.schedule`` of vLLM V1 (vllm/v1/core/sched/scheduler.py and
vllm/v1/core/kv_cache_manager.py, read at vllm-project/vllm 00024d31 / 003df296):

1. **Running requests first, in admission order**, while the token budget
   (``max_num_batched_tokens``) lasts: a request past its prefill gets one decode token, a
   request part-way through its prefill the next chunk of what the budget has left. Each gets KV
   blocks for exactly the tokens scheduled (``allocate_slots``). When the blocks run out, the
   lowest-priority running request, the last admitted (``self.running.pop()`` under FCFS), is
   **preempted by recompute**: its blocks are freed, its computed tokens reset, and it goes back
   to the head of the waiting queue; repeated until the allocation fits or the request itself
   was the one preempted.
2. **Waiting requests**, first come first served, unless this iteration preempted: a request
   takes its prefix hit and blocks for its *first chunk only*, less a watermark of free blocks
   (1 %) that only admissions must leave; the head of the queue blocks the rest. No whole-prompt
   reservation: a long prompt admitted beside others can later run out of blocks mid-prefill and
   be preempted, as in vLLM V1.
3. **Prefix blocks are cached as their chunks complete** (``cache_blocks`` at allocation for the
   tokens scheduled): a 512-token unit becomes a cache hit for later requests as soon as the
   chunk that finishes it is computed, not at the end of the whole prefill.

The gauges are vLLM's ``SchedulerStats``: ``num_requests_waiting`` is the waiting queue,
preempted requests included; ``num_requests_running`` the running list; KV usage the block
pool's (``1 - free / total``, where cached blocks no request references count as free).

Step costs come from the measured profile (``cost.py``), optionally scaled (decode and prefill
apart) and multiplied by seeded log-normal noise (``step_noise``; see ``STEP_NOISE_SIGMA``).

The event loop never steps one token at a time: while no prefill is scheduled, the batch
changes only when a request finishes, so the pod plans a *run* of decode iterations up to the
first finish (at most ``MAX_DECODE_RUN``) and reports only its end. An arrival in the middle
cuts the run at the next iteration boundary (a new request joins at an iteration boundary, as
in vLLM).

Prefill/decode disaggregation: a *prefill-only* request leaves its pod when its prefill is
done (``Handoff``); its decode pod later receives it *remote-prefilled* (the KV was pulled): it
needs blocks for its prompt but no prefill compute, and its first decode iteration emits the
first token.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Final

import numpy as np

from backend.scheduling.types import Topology
from backend.sim.cost import StepCost
from backend.sim.gpu import GpuProfile
from backend.sim.kvcache import BLOCK_TOKENS, KvCache, blocks
from backend.sim.traces.loader import UNIT_TOKENS

MAX_DECODE_RUN: Final = 64
WATERMARK: Final = 0.01  # vLLM keeps 1 % of blocks free when admitting
STEP_NOISE_SIGMA: Final = 0.025
"""Log-sd of an iteration's time around the profile's cost. Measured spread of whole-model
single forward passes: Splitwise's ``perf_model.csv`` (shared/data/splitwise-sim) repeats each
(model, GPU, TP, batch, prompt) prefill 5-15 times; the log-sd of those repeats is 0.012 at the
median point, 0.025 on average (the mean keeps the noisy tail, up to 0.15), over 228 points.
Per-kernel repeats in vidur's tables are tighter (about 0.01 per layer). Decode iterations are
only measured as run means there, whose spread (0.3-0.5 %) does not shrink with run length, so
it bounds the per-iteration noise from below and cannot separate it; the same sigma is used."""


class Request:
    """One trace row, as the router receives it."""

    __slots__ = ("arrival", "output", "priority", "prompt", "rid", "units")

    def __init__(
        self, rid: int, arrival: float, prompt: int, output: int, units: list[int], priority: int
    ) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.units = units
        self.priority = priority


class Seq:
    """A request's state on one pod."""

    __slots__ = (
        "computed",
        "ctx",
        "first_token",
        "generated",
        "held",
        "hit_tokens",
        "owned",
        "preemptions",
        "prefill_only",
        "prefilled",
        "private",
        "remote",
        "req",
        "target",
    )

    def __init__(self, req: Request, *, prefill_only: bool = False) -> None:
        self.req = req
        self.prefill_only = prefill_only
        self.remote = False  # KV arrives by transfer; no prefill compute here
        self.target = req.prompt  # tokens to prefill (prompt, plus generated after a preemption)
        self.computed = 0  # of target, prefix hit included
        self.ctx = 0  # tokens held in KV once prefilled
        self.generated = 0
        self.prefilled = False
        self.held: list[int] = []  # prefix units referenced, a prefix of req.units
        self.private = 0  # blocks owned alone (prompt blocks not yet cached units, decode blocks)
        self.owned = 0  # blocks covering its tokens, shared prefix units included
        self.hit_tokens = -1  # prefix-cache hit at first admission; -1 until admitted
        self.first_token: float | None = None
        self.preemptions = 0

    def clone(self) -> Seq:
        other = Seq.__new__(Seq)
        for name in Seq.__slots__:
            setattr(other, name, getattr(self, name))
        other.held = list(self.held)
        return other


@dataclass(frozen=True, slots=True)
class FirstToken:
    seq: Seq
    time: float


@dataclass(frozen=True, slots=True)
class Done:
    seq: Seq
    time: float


@dataclass(frozen=True, slots=True)
class Handoff:
    """A prefill-only request's prefill finished; its KV is ready to be pulled."""

    seq: Seq
    time: float


Outcome = FirstToken | Done | Handoff


@dataclass(frozen=True, slots=True)
class Metrics:
    """What the pod's /metrics endpoint exposes, as vLLM V1's ``SchedulerStats`` counts them:
    the block pool's usage (referenced blocks; cached unreferenced ones count as free), the
    waiting queue (preempted requests included) and the running list."""

    kv_cache_usage: float
    num_waiting: int
    num_running: int


class Server:
    """One pod. ``enqueue`` and ``advance`` return the time of the pod's next event (or None
    when idle); the event loop calls ``advance`` at that time unless ``version`` moved on."""

    def __init__(
        self,
        index: int,
        name: str,
        profile: GpuProfile,
        *,
        role: str = "",
        topology: Topology | None = None,
        max_context: int = 131_072,
        step_noise: float = 0.0,
        seed: int = 0,
        decode_scale: float = 1.0,
        prefill_scale: float = 1.0,
    ) -> None:
        self.index = index
        self.name = name
        self.profile = profile
        self.role = role
        self.topology = topology
        self.cost = StepCost(profile, max_context, decode_scale, prefill_scale)
        if step_noise < 0:
            raise ValueError("step_noise must be >= 0")
        # Multiplicative log-normal noise per iteration; one generator per pod, seeded, so a
        # run is reproducible and pods do not share draws.
        self.step_noise = step_noise
        self._rng = np.random.default_rng((seed, index)) if step_noise > 0 else None
        self.kv = KvCache(profile.kv_capacity_tokens // BLOCK_TOKENS)
        self.budget = profile.max_num_batched_tokens
        self.max_seqs = profile.max_num_seqs
        self.watermark = int(WATERMARK * self.kv.capacity)
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self.version = 0
        # The run in progress: decoders, prefill chunks (seq, tokens), iteration end times.
        self._decoders: list[Seq] = []
        self._chunks: list[tuple[Seq, int]] = []
        self._ends: list[float] = []
        self._steps = 0
        self.busy = False
        self.iterations = 0
        self.preemptions = 0
        # Gauge history for the router's scrapes: (time, metrics) at every change.
        self._snap_t: list[float] = [0.0]
        self._snap_v: list[Metrics] = [Metrics(0.0, 0, 0)]
        # When the pod last streamed a token, or became busy if it has streamed none since.
        self._streamed_at = 0.0

    # ---- what the outside sees -------------------------------------------------------------

    def metrics(self) -> Metrics:
        return Metrics(self.kv.used / self.kv.capacity, len(self.waiting), len(self.running))

    def metrics_at(self, t: float) -> Metrics:
        """The gauges as they stood at time ``t`` (a scrape instant in the past)."""
        i = bisect.bisect_right(self._snap_t, t) - 1
        return self._snap_v[max(i, 0)]

    def forget_before(self, t: float) -> None:
        """Drop gauge history no scrape at or after ``t`` can ask for."""
        i = bisect.bisect_right(self._snap_t, t) - 1
        if i > 1024:
            del self._snap_t[:i]
            del self._snap_v[:i]

    def _snapshot(self, now: float) -> None:
        m = self.metrics()
        if self._snap_t[-1] == now:
            self._snap_v[-1] = m
        else:
            self._snap_t.append(now)
            self._snap_v.append(m)

    def last_streamed(self, now: float) -> float:
        """When the pod last streamed a token to any request (a first token or a decode step's)
        by ``now``, or became busy if it has streamed none since: what a router proxying its
        streams sees. A decoding pod streams at every iteration's end, so ``now`` less this is
        how far into the iteration in progress it is."""
        t = self._streamed_at
        if self.busy and self._decoders and self._steps:
            i = bisect.bisect_right(self._ends, now, 0, self._steps) - 1
            if i >= 0:
                t = max(t, self._ends[i])
        return t

    def prefix_hit_units(self, units: list[int]) -> int:
        """Leading units of a prompt cached here right now (what KV events would report)."""
        return self.kv.leading_run(units)

    # ---- events ------------------------------------------------------------------------------

    def enqueue(self, seq: Seq, now: float) -> float | None:
        """A request arrives. Returns the pod's new next-event time if it changed."""
        self.waiting.append(seq)
        self._snapshot(now)
        if not self.busy:
            return self._plan(now)
        if self._chunks or self._steps <= 1:
            return None
        # Cut a decode run at the iteration in progress so that the newcomer can join.
        idx = bisect.bisect_left(self._ends, now)
        if idx >= self._steps - 1:
            return None
        keep = idx + 1
        for s in self._decoders:
            back = blocks(s.ctx + self._steps) - blocks(s.ctx + keep)
            s.private -= back
            s.owned -= back
            self.kv.release(back)
        self._steps = keep
        return self._ends[idx]

    def advance(self, now: float, out: list[Outcome]) -> float | None:
        """Finish the current run (its end is ``now``), append what happened to ``out``, and
        plan the next run."""
        steps, ends = self._steps, self._ends
        self.iterations += steps
        finished = False
        if self._decoders:
            self._streamed_at = now
        for s in self._decoders:
            if s.generated == 0:
                s.first_token = ends[0]
                out.append(FirstToken(s, ends[0]))
            s.generated += steps
            s.ctx += steps
            if s.generated >= s.req.output:
                self._finish(s)
                out.append(Done(s, now))
                finished = True
        for s, n in self._chunks:
            s.computed += n
            self._cache_units(s)
            if s.computed < s.target:
                continue
            s.prefilled = True
            s.ctx = s.target
            if s.prefill_only:
                self._finish(s)
                out.append(Handoff(s, now))
                finished = True
                continue
            s.generated += 1
            self._streamed_at = now
            if s.first_token is None:
                s.first_token = now
                out.append(FirstToken(s, now))
            if s.generated >= s.req.output:
                self._finish(s)
                out.append(Done(s, now))
                finished = True
        if finished:
            self.running = [s for s in self.running if s.private >= 0]
        return self._plan(now)

    # ---- internals ---------------------------------------------------------------------------

    def _finish(self, s: Seq) -> None:
        self._release(s)
        s.private = -1  # marks it for removal from `running`

    def _release(self, s: Seq) -> None:
        self.kv.release(s.private)
        s.private = 0
        s.owned = 0
        for h in reversed(s.held):
            self.kv.unref(h)
        s.held = []

    def _cache_units(self, s: Seq) -> None:
        """Prompt units whose tokens are all computed become cached prefix units (vLLM caches
        each full block once the chunk that fills it is scheduled; units are our block)."""
        units, prompt, done = s.req.units, s.req.prompt, s.computed
        for i in range(len(s.held), len(units)):
            end = min(UNIT_TOKENS * (i + 1), prompt)
            if done < end:
                break
            size = blocks(end - UNIT_TOKENS * i)
            self.kv.adopt(units[i], size)
            s.private -= size
            s.held.append(units[i])

    def _preempt(self, s: Seq) -> None:
        self._release(s)
        s.preemptions += 1
        self.preemptions += 1
        s.target = s.req.prompt + s.generated
        s.computed = 0
        s.ctx = 0
        s.prefilled = False
        s.remote = False  # recomputed here from now on
        self.waiting.appendleft(s)

    def _admit(self, s: Seq, budget: int) -> int:
        """Schedule waiting ``s``: its prefix hit and blocks for its first chunk, if they fit
        beside the watermark. Returns the tokens scheduled (0: not admitted)."""
        kv = self.kv
        units = s.req.units
        run = kv.leading_run(units)
        hit = units[:run]
        hit_blocks = sum(kv.size[h] for h in hit)
        hit_tokens = min(run * UNIT_TOKENS, s.req.prompt)
        if s.remote:
            # The whole prompt's KV arrives by transfer, plus a slot for its first decode token.
            n, computed = 1, s.target
            need = blocks(s.target + 1) - hit_blocks
        else:
            computed = min(hit_tokens, s.target - 1)  # the last token is always computed
            n = min(s.target - computed, budget)
            need = max(blocks(computed + n) - hit_blocks, 0)
        if need + self.watermark > kv.available() - kv.evictable_in(hit):
            return 0
        for h in hit:
            kv.ref(h)
        s.held = hit
        kv.allocate(need)
        s.private = need
        s.owned = hit_blocks + need
        s.computed = computed
        if s.remote:
            self._cache_units(s)
            s.prefilled = True
            s.ctx = s.target
        if s.hit_tokens < 0:
            s.hit_tokens = hit_tokens if not s.remote else -2
        return n

    def _run_need(self, decoders: list[Seq], steps: int) -> int:
        """Blocks the decoders need beyond what they own for ``steps`` more tokens each."""
        return sum(blocks(s.ctx + steps) - s.owned for s in decoders)

    def _noisy(self, ms: float) -> float:
        return ms if self._rng is None else ms * math.exp(self.step_noise * self._rng.normal())

    def _plan(self, now: float) -> float | None:
        kv = self.kv
        running = self.running
        budget = self.budget
        decoders: list[Seq] = []
        chunks: list[tuple[Seq, int]] = []
        preempted = False
        i = 0
        # 1. Running requests in admission order, each with blocks for what it is scheduled.
        while i < len(running) and budget > 0:
            s = running[i]
            if s.prefilled:
                n = 1
                need = blocks(s.ctx + 1) - s.owned
            else:
                n = min(s.target - s.computed, budget)
                need = blocks(s.computed + n) - s.owned
            while need > kv.available():
                if len(running) == 1:
                    # Only possible for a request whose context outgrows the whole cache, which
                    # the simulator rules out by clipping traces to the pods' capacity.
                    raise RuntimeError(f"{self.name}: one request outgrew the KV cache")
                # Victims come from the tail, never already scheduled: s is at index i.
                victim = running.pop()
                self._preempt(victim)
                preempted = True
                if victim is s:
                    break
            else:
                if need > 0:
                    kv.allocate(need)
                    s.private += need
                    s.owned += need
                if s.prefilled:
                    decoders.append(s)
                else:
                    chunks.append((s, n))
                budget -= n
                i += 1
                continue
            break
        # 2. Waiting requests, unless this iteration preempted (vLLM admits nothing then).
        while (
            not preempted
            and self.waiting
            and budget > 0
            and len(running) < self.max_seqs
            and (n := self._admit(self.waiting[0], budget))
        ):
            s = self.waiting.popleft()
            running.append(s)
            if s.prefilled:
                decoders.append(s)
            else:
                chunks.append((s, n))
            budget -= n
        self._decoders, self._chunks = decoders, chunks
        if not decoders and not chunks:
            self.busy = False
            self._steps = 0
            self._snapshot(now)
            return None
        if not self.busy:
            self._streamed_at = now
        self.busy = True
        kv_tokens = sum(s.ctx for s in decoders)
        if chunks or preempted:
            # One iteration: a prefill changes the batch, and after a preemption the next
            # iteration may admit the preempted request again.
            steps = 1
            ms = self.cost.step([(n, s.computed) for s, n in chunks], len(decoders), kv_tokens)
            self._ends = [now + self._noisy(ms) / 1000.0]
        else:
            steps = min(MAX_DECODE_RUN, min(s.req.output - s.generated for s in decoders))
            avail = kv.available()
            if self._run_need(decoders, steps) > avail:
                lo, hi = 1, steps  # one step is allocated already; find the longest run that fits
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    if self._run_need(decoders, mid) <= avail:
                        lo = mid
                    else:
                        hi = mid - 1
                steps = lo
            for s in decoders:
                grow = blocks(s.ctx + steps) - s.owned
                if grow:
                    kv.allocate(grow)
                    s.private += grow
                    s.owned += grow
            costs = self.cost.decode_run(len(decoders), kv_tokens, steps)
            if self._rng is not None:
                costs = costs * np.exp(self.step_noise * self._rng.standard_normal(steps))
            self._ends = (now + costs.cumsum() / 1000.0).tolist()
        self._steps = steps
        self._snapshot(now)
        return self._ends[steps - 1]

    # ---- look-ahead (the oracle, the floor) ------------------------------------------------------

    def clone(self) -> Server:
        """A copy of this pod as it stands (queues, KV, the run in progress) that can be run
        forward without touching it. The copy's steps are noise-free: it stands for what the
        present lets anyone know, and future noise is not part of the present."""
        other = Server.__new__(Server)
        for name in (
            "index",
            "name",
            "profile",
            "role",
            "topology",
            "cost",
            "budget",
            "max_seqs",
            "watermark",
            "version",
            "_steps",
            "busy",
            "iterations",
            "preemptions",
            "_streamed_at",
        ):
            setattr(other, name, getattr(self, name))
        other.kv = self.kv.clone()
        other.step_noise = 0.0
        other._rng = None
        copies = {id(s): s.clone() for s in (*self.running, *self.waiting)}
        other.running = [copies[id(s)] for s in self.running]
        other.waiting = deque(copies[id(s)] for s in self.waiting)
        other._decoders = [copies[id(s)] for s in self._decoders]
        other._chunks = [(copies[id(s)], n) for s, n in self._chunks]
        other._ends = list(self._ends)
        other._snap_t = [0.0]
        other._snap_v = [Metrics(0.0, 0, 0)]
        return other

    def lookahead(
        self,
        seq: Seq,
        now: float,
        *,
        decode_tokens: int = 16,
        horizon_s: float = 600.0,
        ahead: tuple[Seq, ...] = (),
    ) -> tuple[float, float]:
        """What ``seq`` would see here if nothing else arrived: (seconds to its first token, or
        to its handoff for a prefill-only request; mean ms per output token over its first
        ``decode_tokens`` tokens, NaN if unknown). Runs a copy of this pod forward; the pod
        itself is untouched. ``(inf, nan)`` if the first token is not out within ``horizon_s``
        (so a caller can stop early once it knows a better pod). ``ahead``: requests already
        on their way here (under P/D, still prefilling elsewhere) that will queue first."""
        sim = self.clone()
        t: float | None = None
        for other in ahead:
            t = sim.enqueue(other.clone(), now) or t
        probe = seq.clone()
        t = sim.enqueue(probe, now) or t
        nxt: float | None = sim._ends[sim._steps - 1] if sim.busy else t
        out: list[Outcome] = []
        want = min(probe.req.output, decode_tokens + 1)
        first = math.inf
        while nxt is not None and (nxt - now <= horizon_s or math.isfinite(first)):
            out.clear()
            at: float = nxt
            nxt = sim.advance(at, out)
            if probe.prefill_only and any(isinstance(o, Handoff) and o.seq is probe for o in out):
                return at - now, math.nan
            if probe.first_token is not None and math.isinf(first):
                first = probe.first_token
            if probe.generated >= want:
                tpot = (
                    (at - first) * 1000.0 / (probe.generated - 1)
                    if probe.generated > 1
                    else (math.nan)
                )
                return first - now, tpot
        return (first - now if math.isfinite(first) else math.inf), math.nan
