"""Measured cost model of one model-server iteration for a (GPU, model) pair.

The tables come from ``bench/tools/derive_profiles.py``, which turns kernel timings measured on
real GPUs (vidur, aiconfigurator) into the JSON files of ``backend/sim/profiles/``. Every table is
interpolated piecewise-linearly in log-log space: kernel time is flat while a kernel is
launch- or bandwidth-bound and becomes a power law (slope 1 for linear layers and decode
attention, about 2 for prefill attention) once it is compute-bound, and log-log interpolation
follows both regimes with few knots. Beyond the last knot the last segment's power law is
extended, which is how the underlying kernels scale.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

PROFILE_KIND = "gpu_profile"
_ROWS_KEPT = 4096


def _segment(lxs: FloatArray, xs0: float, x: FloatArray) -> tuple[npt.NDArray[np.intp], FloatArray]:
    """Left knot index and position within the segment, in log space (``lxs``: the knots'
    logs; ``xs0``: the first knot).

    Below the first knot the weight is clamped to 0 (kernels are flat there); above the last
    knot it is left unclamped so that the last segment is extrapolated.
    """
    lx = np.log(np.maximum(x, xs0))
    # np.minimum/np.maximum, not np.clip: the same integers without clip's Python wrapper,
    # which cost more than the search itself on the simulator's small arrays.
    i = np.minimum(np.maximum(np.searchsorted(lxs, lx, side="right") - 1, 0), len(lxs) - 2)
    w = (lx - lxs[i]) / (lxs[i + 1] - lxs[i])
    return i, np.maximum(w, 0.0)


@dataclass(frozen=True, eq=False)
class LogLogTable:
    """y(x) sampled at increasing knots ``x``; y > 0."""

    x: FloatArray
    y: FloatArray
    _lx: FloatArray = field(init=False, repr=False)
    _ly: FloatArray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # The logs once, not per call: the simulator calls these tables on every decode run.
        object.__setattr__(self, "_lx", np.log(self.x))
        object.__setattr__(self, "_ly", np.log(self.y))

    def __call__(self, x: npt.ArrayLike) -> FloatArray:
        xa = np.asarray(x, dtype=np.float64)
        i, w = _segment(self._lx, self.x[0], xa)
        ly = self._ly
        return np.asarray(np.exp(ly[i] + w * (ly[i + 1] - ly[i])), dtype=np.float64)


@dataclass(frozen=True, eq=False)
class LogLogGrid:
    """z(a, b) sampled on the grid ``a`` x ``b`` (bilinear in log-log space)."""

    a: FloatArray
    b: FloatArray
    z: FloatArray
    _la: FloatArray = field(init=False, repr=False)
    _lb: FloatArray = field(init=False, repr=False)
    _lz: FloatArray = field(init=False, repr=False)
    _rows: dict[float, tuple[int, float]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_la", np.log(self.a))
        object.__setattr__(self, "_lb", np.log(self.b))
        object.__setattr__(self, "_lz", np.log(self.z))
        object.__setattr__(self, "_rows", {})

    def __call__(self, a: npt.ArrayLike, b: npt.ArrayLike) -> FloatArray:
        aa, bb = np.broadcast_arrays(
            np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        )
        i, wa = _segment(self._la, self.a[0], aa)
        j, wb = _segment(self._lb, self.b[0], bb)
        lz = self._lz
        low = lz[i, j] + wb * (lz[i, j + 1] - lz[i, j])
        high = lz[i + 1, j] + wb * (lz[i + 1, j + 1] - lz[i + 1, j])
        return np.asarray(np.exp(low + wa * (high - low)), dtype=np.float64)

    def along(self, a: float, b: FloatArray) -> FloatArray:
        """``self(a, b)`` for one ``a`` and an array ``b``, equal to it bit for bit (the same
        operations in the same order), with the ``a`` segment found once per ``a``: a decode
        run costs one batch size over many KV lengths."""
        row = self._rows.get(a)
        if row is None:
            i, wa = _segment(self._la, self.a[0], np.asarray([a], dtype=np.float64))
            row = (int(i[0]), float(wa[0]))
            if len(self._rows) >= _ROWS_KEPT:  # batch sizes are few; any other a is bounded
                self._rows.clear()
            self._rows[a] = row
        i0, wa0 = row
        j, wb = _segment(self._lb, self.b[0], b)
        lo_row, hi_row = self._lz[i0], self._lz[i0 + 1]
        low = lo_row[j] + wb * (lo_row[j + 1] - lo_row[j])
        high = hi_row[j] + wb * (hi_row[j + 1] - hi_row[j])
        return np.asarray(np.exp(low + wa0 * (high - low)), dtype=np.float64)


@dataclass(frozen=True)
class SourceRef:
    """Where a shipped number came from (the licences require the notice to travel with it)."""

    file: str
    repository: str
    commit: str
    license: str


@dataclass(frozen=True, eq=False, repr=False)
class GpuProfile:
    """Noise-free forward-pass cost of one model on one GPU (TP=1), in milliseconds.

    All methods take scalars or numpy arrays (broadcast together) and return float64 arrays.
    Attention is accounted per sequence: ``prefill_ms`` and ``iteration_ms`` cost one prefill
    sequence; a simulator batching several prefills adds ``prefill_attention_ms`` per extra one.
    """

    name: str
    device: str
    model: str
    n_layers: int
    kv_capacity_tokens: int
    kv_bytes_per_token: int
    max_num_batched_tokens: int
    max_num_seqs: int
    linear: LogLogTable
    lm_head: LogLogTable
    prefill_attention: LogLogTable
    decode_attention: LogLogGrid
    overhead_ms: float
    overhead_per_seq_ms: float
    source: tuple[SourceRef, ...]
    fit: Mapping[str, Any] = field(default_factory=dict)
    assumptions: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"GpuProfile({self.name!r}, {self.device!r}, {self.model!r})"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuProfile:
        """Build from a parsed profile JSON (as written by ``derive_profiles.py``)."""
        if data.get("kind") != PROFILE_KIND:
            raise ValueError(f"not a GPU profile: kind={data.get('kind')!r}")
        tables = data["tables"]

        def table(key: str) -> LogLogTable:
            t = tables[key]
            return LogLogTable(np.asarray(t["x"], np.float64), np.asarray(t["ms"], np.float64))

        dec = tables["decode_attention"]
        return cls(
            name=data["name"],
            device=data["gpu"]["device"],
            model=data["model"]["name"],
            n_layers=int(data["model"]["n_layers"]),
            kv_capacity_tokens=int(data["kv_cache"]["capacity_tokens"]),
            kv_bytes_per_token=int(data["kv_cache"]["bytes_per_token"]),
            max_num_batched_tokens=int(data["serving"]["max_num_batched_tokens"]),
            max_num_seqs=int(data["serving"]["max_num_seqs"]),
            linear=table("linear"),
            lm_head=table("lm_head"),
            prefill_attention=table("prefill_attention"),
            decode_attention=LogLogGrid(
                np.asarray(dec["batch"], np.float64),
                np.asarray(dec["kv_tokens"], np.float64),
                np.asarray(dec["ms"], np.float64),
            ),
            overhead_ms=float(data["step_overhead"]["ms"]),
            overhead_per_seq_ms=float(data["step_overhead"]["per_seq_ms"]),
            source=tuple(
                SourceRef(s["file"], s["repository"], s["commit"], s["license"])
                for s in data["source"]
            ),
            fit={k: v.get("fit") for k, v in tables.items()}
            | {"step_overhead": data["step_overhead"].get("fit")},
            assumptions=dict(data.get("assumptions", {})),
        )

    def linear_ms(self, tokens: npt.ArrayLike) -> FloatArray:
        """All non-attention layers (projections, MLP, norms, embedding) over ``tokens`` rows."""
        t = np.asarray(tokens, dtype=np.float64)
        return np.where(t > 0, self.linear(t), 0.0)

    def lm_head_ms(self, rows: npt.ArrayLike) -> FloatArray:
        """Vocabulary projection; one row per sequence that samples a token this iteration."""
        r = np.asarray(rows, dtype=np.float64)
        return np.where(r > 0, self.lm_head(r), 0.0)

    def step_overhead_ms(self, seqs: npt.ArrayLike) -> FloatArray:
        """Per-iteration framework cost (scheduling, sampling, launch gaps) not in kernel tables."""
        s = np.asarray(seqs, dtype=np.float64)
        return np.where(s > 0, self.overhead_ms + self.overhead_per_seq_ms * s, 0.0)

    def prefill_attention_ms(
        self, new_tokens: npt.ArrayLike, cached_tokens: npt.ArrayLike = 0
    ) -> FloatArray:
        """Causal attention of ``new_tokens`` queries over ``cached + new`` keys, all layers.

        Causal prefill FLOPs of a prefix-extended prompt are those of the whole prompt minus those
        of the cached part, hence ``A(c + n) - A(c)``. Two floors keep it physical: the kernel is
        never cheaper than a fresh prompt of ``n`` tokens (launch cost), nor than reading the
        whole KV once (what a one-sequence decode step over ``c + n`` tokens measures).
        """
        n, c = np.broadcast_arrays(
            np.asarray(new_tokens, dtype=np.float64),
            np.maximum(np.asarray(cached_tokens, dtype=np.float64), 0.0),
        )
        total = c + n
        flops = self.prefill_attention(total) - np.where(c > 0, self.prefill_attention(c), 0.0)
        floor = np.maximum(self.prefill_attention(n), self.decode_attention(1.0, total))
        return np.where(n > 0, np.maximum(flops, floor), 0.0)

    def decode_attention_ms(
        self, batch_size: npt.ArrayLike, mean_kv_tokens: npt.ArrayLike
    ) -> FloatArray:
        """Decode attention, all layers, of ``batch_size`` sequences of ``mean_kv_tokens`` each."""
        b = np.asarray(batch_size, dtype=np.float64)
        return np.where(b > 0, self.decode_attention(np.maximum(b, 1.0), mean_kv_tokens), 0.0)

    def decode_attention_run(self, batch_size: int, mean_kv_tokens: FloatArray) -> FloatArray:
        """``decode_attention_ms`` of one batch of ``batch_size`` >= 1 sequences at each of
        ``mean_kv_tokens``, equal to it bit for bit and several times cheaper
        (``LogLogGrid.along``; 3-4x on 1-128 steps): the simulator's decode runs call it for every
        run."""
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        return self.decode_attention.along(float(batch_size), mean_kv_tokens)

    def iteration_ms(
        self,
        prefill_tokens: npt.ArrayLike,
        cached_tokens: npt.ArrayLike,
        decode_batch: npt.ArrayLike,
        mean_kv_tokens: npt.ArrayLike,
    ) -> FloatArray:
        """One continuous-batching iteration: a prefill chunk of one sequence plus a decode batch.

        Linear layers see prefill and decode tokens as one matrix, so they are costed together;
        attention is per sequence kind. A finishing prefill samples one token, like each decoder.
        """
        p = np.asarray(prefill_tokens, dtype=np.float64)
        b = np.asarray(decode_batch, dtype=np.float64)
        seqs = b + (p > 0)
        return (
            self.linear_ms(p + b)
            + self.prefill_attention_ms(p, cached_tokens)
            + self.decode_attention_ms(b, mean_kv_tokens)
            + self.lm_head_ms(seqs)
            + self.step_overhead_ms(seqs)
        )

    def prefill_ms(self, new_tokens: npt.ArrayLike, cached_tokens: npt.ArrayLike = 0) -> FloatArray:
        """One forward pass prefilling ``new_tokens`` uncached tokens after ``cached_tokens``."""
        return self.iteration_ms(new_tokens, cached_tokens, 0.0, 0.0)

    def decode_step_ms(
        self, batch_size: npt.ArrayLike, mean_kv_tokens: npt.ArrayLike
    ) -> FloatArray:
        """One decode iteration of ``batch_size`` sequences with ``mean_kv_tokens`` KV each."""
        return self.iteration_ms(0.0, 0.0, batch_size, mean_kv_tokens)


def profiles_dir() -> Traversable:
    """The shipped ``profiles/`` folder (works from a wheel as well as from a checkout)."""
    return resources.files("backend.sim") / "profiles"


def _read_json(name: str) -> dict[str, Any]:
    path = profiles_dir() / f"{name}.json"
    if not path.is_file():
        raise KeyError(f"unknown profile {name!r}; available: {available_profiles()}")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def available_profiles() -> list[str]:
    """Names of the shipped GPU profiles (``<gpu>-<model>``)."""
    names = []
    for entry in profiles_dir().iterdir():
        if entry.name.endswith(".json"):
            data = json.loads(entry.read_text(encoding="utf-8"))
            if data.get("kind") == PROFILE_KIND:
                names.append(str(data["name"]))
    return sorted(names)


@cache
def load_profile(name: str) -> GpuProfile:
    """Load a shipped profile by name, e.g. ``"a100-llama2-7b"``."""
    return GpuProfile.from_json(_read_json(name))
