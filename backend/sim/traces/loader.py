"""Request traces for replay: the shipped Mooncake and Azure 2023 traces, rescaled and clipped.

A trace is columnar: arrival time, prompt and output tokens, and each request's prefix-block
ids (one id per 512-token block of the prompt; two requests that share their leading ids share
that much prompt). The Mooncake traces carry real block ids. The Azure traces carry none, so
they get synthetic ones from a documented model of shared system prompts (``tenant_prefixes``).

Timestamps are recorded at some resolution, the trace's *tick* (``Trace.tick_s``): Mooncake's
conversation trace stamps arrivals on a 3-second clock (1,180 distinct instants for 12,031
requests, consecutive instants 2,999-3,001 ms apart), so a whole tick's requests appear to
arrive together. ``Trace.spread_ties`` places each arrival uniformly at random within its tick,
seeded, keeping the trace's order.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Final

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

UNIT_TOKENS: Final = 512
"""Tokens per prefix block id (Mooncake's granularity; the synthetic ids use the same)."""

TRACE_FILES: Final[dict[str, tuple[str, str]]] = {
    "mooncake-conversation": ("mooncake", "conversation_trace.jsonl"),
    "mooncake-synthetic": ("mooncake", "synthetic_trace.jsonl"),
    "azure-code": ("azure", "AzureLLMInferenceTrace_code.csv"),
    "azure-conv": ("azure", "AzureLLMInferenceTrace_conv.csv"),
}
TRACE_NAMES: Final = tuple(TRACE_FILES)

TICK_S: Final[dict[str, float]] = {
    # Distinct timestamps sit on a 3 s grid (gaps of 3,000 +- 1 ms between distinct instants).
    "mooncake-conversation": 3.0,
    # Integer milliseconds, Poisson arrivals: few ties.
    "mooncake-synthetic": 0.001,
    # 7 fractional digits of a second.
    "azure-code": 1e-7,
    "azure-conv": 1e-7,
}
"""Resolution of each shipped trace's recorded arrival times, in seconds."""


@dataclass(frozen=True)
class TenantModel:
    """Synthetic shared prefixes for traces without block ids (the Azure traces).

    Each request belongs to one of ``tenants`` tenants, drawn with Zipf(``zipf_s``) popularity
    (a few big customers, a long tail); each tenant has a system prompt of 1..``max_units``
    whole 512-token blocks, drawn once. A request's leading blocks, as far as its prompt covers
    the system prompt in whole blocks, are its tenant's; the rest of its blocks are unique. No
    conversation structure is invented: the only reuse is the system prompt.
    """

    tenants: int = 32
    zipf_s: float = 1.0
    max_units: int = 4
    seed: int = 0


@dataclass(frozen=True, eq=False)
class Trace:
    name: str
    arrival_s: FloatArray  # sorted, from 0 (the first arrival, or the start of its tick)
    input_tokens: IntArray
    output_tokens: IntArray
    hash_ids: IntArray  # all requests' block ids, concatenated
    hash_offsets: IntArray  # request i's ids are hash_ids[offsets[i]:offsets[i + 1]]
    prefix_source: str
    tick_s: float = 0.0
    """Resolution of the recorded arrival times (seconds at the current load; 0: exact)."""

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    def units(self, i: int) -> list[int]:
        lo, hi = int(self.hash_offsets[i]), int(self.hash_offsets[i + 1])
        ids: list[int] = self.hash_ids[lo:hi].tolist()
        return ids

    def all_units(self) -> list[list[int]]:
        flat: list[int] = self.hash_ids.tolist()
        bounds: list[int] = self.hash_offsets.tolist()
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(self))]

    def scaled(self, load: float) -> Trace:
        """The same requests arriving ``load`` times as fast (load 2 = twice the request rate)."""
        if not load > 0:
            raise ValueError("load must be > 0")
        return replace(self, arrival_s=self.arrival_s / load, tick_s=self.tick_s / load)

    def spread_ties(self, seed: int) -> Trace:
        """Each arrival placed uniformly at random within its recorded tick.

        A request stamped ``t`` arrived somewhere in ``[t, t + tick)``; it gets a uniform draw
        there, capped at the next distinct stamp so that the order of the trace is kept (draws
        within one stamp are sorted and handed out in trace order). Seeded: the same seed gives
        the same arrivals. The time origin stays where it was (the first tick starts at 0).
        """
        if self.tick_s <= 0 or not len(self):
            return self
        t = self.arrival_s
        stamps, first = np.unique(t, return_index=True)
        counts = np.diff(np.append(first, len(t)))
        ends = np.minimum(stamps + self.tick_s, np.append(stamps[1:], np.inf))
        width = np.repeat(ends - stamps, counts)
        group = np.repeat(np.arange(len(stamps)), counts)
        u = np.random.default_rng(seed).random(len(t))
        # Sorting (group, u) orders the draws within each stamp; trace order is kept.
        u = u[np.lexsort((u, group))]
        return replace(self, arrival_s=t + u * width)

    def select(self, mask: npt.NDArray[np.bool_]) -> Trace:
        """The requests where ``mask`` holds, arrivals re-based to start at 0."""
        idx = np.flatnonzero(mask)
        counts = np.diff(self.hash_offsets)[idx]
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        ids = (
            np.concatenate(
                [self.hash_ids[self.hash_offsets[i] : self.hash_offsets[i + 1]] for i in idx]
            )
            if len(idx)
            else np.zeros(0, np.int64)
        )
        arrival = self.arrival_s[idx]
        return replace(
            self,
            arrival_s=arrival - (arrival[0] if len(idx) else 0.0),
            input_tokens=self.input_tokens[idx],
            output_tokens=self.output_tokens[idx],
            hash_ids=ids.astype(np.int64),
            hash_offsets=offsets,
        )

    def head(self, n: int) -> Trace:
        """The first ``n`` requests."""
        mask = np.zeros(len(self), dtype=np.bool_)
        mask[:n] = True
        return self.select(mask)

    def window(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in ``[start_s, end_s)``."""
        return self.select((self.arrival_s >= start_s) & (self.arrival_s < end_s))

    def clipped(self, max_model_len: int) -> Trace:
        """Fit every request into a ``max_model_len`` context window.

        Output is capped at half the window, then the prompt at what is left; the prompt keeps its
        leading blocks (prefix reuse stays as it was for the part kept).
        """
        if max_model_len < 2:
            raise ValueError("max_model_len must be >= 2")
        out = np.minimum(self.output_tokens, max_model_len // 2)
        inp = np.minimum(self.input_tokens, max_model_len - out)
        if np.array_equal(inp, self.input_tokens) and np.array_equal(out, self.output_tokens):
            return self
        keep = -(-inp // UNIT_TOKENS)
        starts = self.hash_offsets[:-1]
        ids = np.concatenate(
            [self.hash_ids[s : s + k] for s, k in zip(starts.tolist(), keep.tolist(), strict=True)]
        )
        offsets = np.concatenate(([0], np.cumsum(keep))).astype(np.int64)
        return replace(
            self,
            input_tokens=inp.astype(np.int64),
            output_tokens=out.astype(np.int64),
            hash_ids=ids.astype(np.int64),
            hash_offsets=offsets,
        )

    def stats(self) -> dict[str, float]:
        """Size, rate, token means and the prefix reuse an unbounded cache would see."""
        seen: set[int] = set()
        hit_units = total_units = 0
        for ids in self.all_units():
            run = 0
            for h in ids:
                if h not in seen:
                    break
                run += 1
            hit_units += run
            total_units += len(ids)
            seen.update(ids)
        n = len(self)
        return {
            "requests": n,
            "duration_s": round(self.duration_s, 1),
            "rate_rps": round(n / self.duration_s, 3) if self.duration_s > 0 else 0.0,
            "input_mean": round(float(self.input_tokens.mean()), 1) if n else 0.0,
            "input_p50": float(np.median(self.input_tokens)) if n else 0.0,
            "output_mean": round(float(self.output_tokens.mean()), 1) if n else 0.0,
            "unbounded_cache_hit_share": round(hit_units / total_units, 4) if total_units else 0.0,
        }


def traces_dir() -> Traversable:
    return resources.files("backend.sim") / "traces"


def _mooncake(path: Traversable, name: str) -> Trace:
    arrival, inp, out, counts, ids = [], [], [], [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        arrival.append(row["timestamp"] / 1000.0)
        inp.append(row["input_length"])
        out.append(row["output_length"])
        counts.append(len(row["hash_ids"]))
        ids.extend(row["hash_ids"])
    a = np.asarray(arrival, dtype=np.float64)
    return Trace(
        name=name,
        arrival_s=a - a[0],
        input_tokens=np.asarray(inp, dtype=np.int64),
        output_tokens=np.maximum(np.asarray(out, dtype=np.int64), 1),
        hash_ids=np.asarray(ids, dtype=np.int64),
        hash_offsets=np.concatenate(([0], np.cumsum(counts))).astype(np.int64),
        prefix_source="mooncake hash_ids (real, 512-token blocks)",
        tick_s=TICK_S[name],
    )


def _seconds(stamp: str) -> float:
    """``YYYY-MM-DD HH:MM:SS.fffffff`` (7 fractional digits, beyond ``fromisoformat``)."""
    date, clock = stamp.strip().split(" ")
    year, month, day = (int(x) for x in date.split("-"))
    hours, minutes, seconds = clock.split(":")
    days = np.datetime64(f"{year:04d}-{month:02d}-{day:02d}").astype(np.int64)
    return float(days) * 86400.0 + int(hours) * 3600.0 + int(minutes) * 60.0 + float(seconds)


def tenant_prefixes(input_tokens: IntArray, model: TenantModel) -> tuple[IntArray, IntArray]:
    """Block ids per ``TenantModel`` (flat ids and offsets, as ``Trace`` stores them)."""
    rng = np.random.default_rng(model.seed)
    n = int(input_tokens.shape[0])
    weights = 1.0 / np.arange(1, model.tenants + 1, dtype=np.float64) ** model.zipf_s
    tenant = rng.choice(model.tenants, size=n, p=weights / weights.sum())
    system_units = rng.integers(1, model.max_units + 1, size=model.tenants)
    total = -(-input_tokens // UNIT_TOKENS)
    shared = np.minimum(system_units[tenant], input_tokens // UNIT_TOKENS)
    next_unique = model.tenants * model.max_units
    ids: list[int] = []
    for t, s, k in zip(tenant.tolist(), shared.tolist(), total.tolist(), strict=True):
        ids.extend(range(t * model.max_units, t * model.max_units + s))
        ids.extend(range(next_unique, next_unique + k - s))
        next_unique += k - s
    offsets = np.concatenate(([0], np.cumsum(total))).astype(np.int64)
    return np.asarray(ids, dtype=np.int64), offsets


def _azure(path: Traversable, name: str, tenants: TenantModel) -> Trace:
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    t = np.asarray([_seconds(r["TIMESTAMP"]) for r in rows], dtype=np.float64)
    order = np.argsort(t, kind="stable")
    inp = np.maximum(np.asarray([int(r["ContextTokens"]) for r in rows], np.int64)[order], 1)
    out = np.maximum(np.asarray([int(r["GeneratedTokens"]) for r in rows], np.int64)[order], 1)
    ids, offsets = tenant_prefixes(inp, tenants)
    return Trace(
        name=name,
        arrival_s=t[order] - t[order][0],
        input_tokens=inp,
        output_tokens=out,
        hash_ids=ids,
        hash_offsets=offsets,
        prefix_source=(
            f"synthetic: {tenants.tenants} tenants, Zipf({tenants.zipf_s}) popularity, system "
            f"prompts of 1-{tenants.max_units} x {UNIT_TOKENS} tokens, seed {tenants.seed}"
        ),
        tick_s=TICK_S[name],
    )


@cache
def load_trace(name: str, tenants: TenantModel | None = None) -> Trace:
    """A shipped trace by name (``TRACE_NAMES``); ``tenants`` only applies to the Azure ones."""
    if name not in TRACE_FILES:
        raise KeyError(f"unknown trace {name!r}; available: {', '.join(TRACE_NAMES)}")
    folder, filename = TRACE_FILES[name]
    path = traces_dir() / folder / filename
    if folder == "mooncake":
        return _mooncake(path, name)
    return _azure(path, name, tenants or TenantModel())
