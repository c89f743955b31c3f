"""Derive the shipped latency profiles in backend/sim/profiles/ from the measured GPU data.

Reads the third-party data folder (see its README.md) and writes, per (GPU, model):
log-spaced lookup tables of linear-layer, LM-head, prefill-attention and decode-attention time,
the KV-cache capacity, and a per-iteration framework overhead fitted to whole-model benchmarks;
plus ``workload.json`` (prompt/output length and prefix-hit quantiles from real traces). Prints
fit quality and a sanity comparison against whole-model measurements.

    .venv/bin/python bench/tools/derive_profiles.py [DATA_DIR]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from backend.sim.gpu import GpuProfile  # noqa: E402

FloatArray = npt.NDArray[np.float64]
OUT_DIR = REPO_ROOT / "backend" / "sim" / "profiles"

# Snapshot commits and licences, as listed in the data folder's README.md.
UPSTREAM: dict[str, tuple[str, str, str, str]] = {
    # folder: (repository, commit, licence, licence file in the data folder)
    "vidur": ("microsoft/vidur", "7d47513363ec447a741ac5e47241580b47724fbf", "MIT", "LICENSE"),
    "aiconfigurator": (
        "ai-dynamo/aiconfigurator",
        "095f58a51c4ca8e61b66ec108d86f223f8d559ce",
        "Apache-2.0",
        "LICENSE",
    ),
    "splitwise-sim": (
        "Mutinifni/splitwise-sim",
        "8f99e7dc9b407f4ce2488d03dd44c0b8b946dab0",
        "MIT",
        "LICENSE",
    ),
    "llm-inference-bench": (
        "argonne-lcf/LLM-Inference-Bench",
        "4211f5d4e9bc0145ed541b6d372d5d8223b44235",
        "BSD-3-Clause",
        "LICENSE",
    ),
    "azure-llm-2023": (
        "Azure/AzurePublicDataset",
        "b469a113cedca53ddc3bdea71a143dc4b7d8700c",
        "CC-BY-4.0",
        "LICENSE",
    ),
    "mooncake": (
        "kvcache-ai/Mooncake",
        "3b5a594133958449a1feaf1c9e0fc1b553e34a28",
        "Apache-2.0",
        "LICENSE-APACHE",
    ),
}
# Where each folder's files live upstream (our CSVs beside aiconfigurator's parquet are lossless
# conversions of those originals).
UPSTREAM_PREFIX = {
    "vidur": "data/profiling/compute/",
    "aiconfigurator": "aic-core/src/aiconfigurator_core/systems/data/",
    "splitwise-sim": "data/",
    "llm-inference-bench": "Plots/",
    "azure-llm-2023": "data/",
    "mooncake": "FAST25-release/traces/",
}

VIDUR_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
# Kernel time never falls when work grows; measured dips are timer noise. A 0.1 % rise per knot
# keeps the model strictly monotone, so that more work always costs more.
MIN_KNOT_RISE = 1.001
GIB = 1024**3


@dataclass(frozen=True)
class ModelSpec:
    key: str
    hf_name: str
    n_layers: int  # num_hidden_layers in the model's config.json (not in the CSVs)
    max_model_len: int  # max_position_embeddings in config.json


@dataclass(frozen=True)
class GpuSpec:
    key: str
    vidur: str
    aic: str
    memory_gib: float
    bench_hardware: str
    splitwise: str
    # vLLM's own defaults for `vllm serve` (EngineArgs.get_batch_defaults): A100s keep the small
    # budget, other >= 70 GiB GPUs get the large one.
    max_num_batched_tokens: int
    max_num_seqs: int


MODELS = {
    "llama2-7b": ModelSpec("llama2-7b", "meta-llama/Llama-2-7b-hf", 32, 4096),
    "llama3-8b": ModelSpec("llama3-8b", "meta-llama/Meta-Llama-3-8B", 32, 8192),
}
GPUS = {
    "a100": GpuSpec("a100", "a100", "a100_sxm", 80, "Nvidia A100 GPU", "a100-80gb", 2048, 256),
    "h100": GpuSpec("h100", "h100", "h100_sxm", 80, "Nvidia H100 GPU", "h100-80gb", 8192, 1024),
}
# The combinations the data cover at TP=1: vidur has no H100 Llama-3-8B profile.
PROFILES = (("a100", "llama2-7b"), ("h100", "llama2-7b"), ("a100", "llama3-8b"))

GPU_MEMORY_UTILIZATION = 0.9  # vLLM default
BLOCK_SIZE = 16  # vLLM default KV block size
RESERVED_GIB = 2.0  # CUDA context, cuBLAS/NCCL workspaces, CUDA graphs (vLLM "non-torch" memory)


# ----------------------------------------------------------------------------- reading


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_entry(data: Path, rel: str) -> dict[str, str]:
    folder = rel.split("/", 1)[0]
    repo, commit, licence, _ = UPSTREAM[folder]
    upstream_path = UPSTREAM_PREFIX[folder] + rel.split("/", 1)[1]
    if folder == "aiconfigurator":
        upstream_path = upstream_path.removesuffix(".csv") + ".parquet"
    return {
        "file": rel,
        "repository": repo,
        "upstream_path": upstream_path,
        "commit": commit,
        "license": licence,
        "license_file": f"licenses/LICENSE-{folder}.txt",
        "sha256": sha256(data / rel),
    }


def sig(x: float, digits: int = 5) -> float:
    """Round to significant digits so that the JSON stays small."""
    return float(f"{x:.{digits}g}")


def sigs(xs: Iterable[float], digits: int = 5) -> list[float]:
    return [sig(float(x), digits) for x in xs]


def monotone(values: FloatArray) -> FloatArray:
    out = np.array(values, dtype=np.float64)
    for i in range(1, len(out)):
        out[i] = max(out[i], out[i - 1] * MIN_KNOT_RISE)
    return out


def loglog_interp(x: FloatArray, xs: FloatArray, ys: FloatArray) -> FloatArray:
    return np.asarray(np.exp(np.interp(np.log(x), np.log(xs), np.log(ys))), dtype=np.float64)


def ape_stats(pred: FloatArray, meas: FloatArray) -> dict[str, float]:
    ape = np.abs(pred / meas - 1.0)
    return {
        "mape_pct": sig(100 * float(ape.mean()), 3),
        "p90_ape_pct": sig(100 * float(np.percentile(ape, 90)), 3),
        "max_ape_pct": sig(100 * float(ape.max()), 3),
        "n_points": len(ape),
    }


def loo_stats(xs: FloatArray, ys: FloatArray) -> dict[str, float]:
    """Leave-one-out error of log-log interpolation at interior knots (how good the grid is)."""
    pred = [
        loglog_interp(xs[i : i + 1], np.delete(xs, i), np.delete(ys, i))[0]
        for i in range(1, len(xs) - 1)
    ]
    return ape_stats(np.asarray(pred), ys[1:-1])


# ----------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class Shapes:
    n_head: int
    n_kv_head: int
    n_embd: int
    n_expanded_embd: int
    vocab_size: int


def linear_table(
    path: Path, n_layers: int
) -> tuple[Shapes, FloatArray, FloatArray, dict[str, Any], FloatArray, FloatArray]:
    """Whole-pass non-attention time vs tokens from vidur's per-layer operator medians."""
    rows = [r for r in read_csv(path) if r["num_tensor_parallel_workers"] == "1"]
    r0 = rows[0]
    shapes = Shapes(
        int(r0["n_head"]),
        int(r0["n_kv_head"]),
        int(r0["n_embd"]),
        int(r0["n_expanded_embd"]),
        int(r0["vocab_size"]),
    )
    per_tokens: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        layer = sum(float(r[f"time_stats.{op}.median"]) for op in VIDUR_OPS)
        per_tokens[int(r["num_tokens"])].append(
            n_layers * layer + float(r["time_stats.emb.median"])
        )
    mx = np.array(sorted(per_tokens), dtype=np.float64)
    my = np.array([statistics.median(per_tokens[int(t)]) for t in mx])
    # Quarter-octave knots, each from a log-log line through the measurements within +-1/4 octave:
    # that smooths the tile-quantisation jitter (power-of-two sizes run faster than their
    # neighbours) and, unlike a window median, is unbiased at the edge of the measured range.
    lmx, lmy = np.log(mx), np.log(my)
    knots = np.unique(np.round(2.0 ** (np.arange(0, 4 * math.log2(mx[-1]) + 1) / 4)))
    vals = np.empty_like(knots)
    for k, t in enumerate(knots):
        near = np.abs(lmx - math.log(t)) <= math.log(2) / 4
        if near.sum() >= 3:
            slope, icpt = np.polyfit(lmx[near], lmy[near], 1)
            vals[k] = math.exp(icpt + slope * math.log(t))
        else:
            vals[k] = loglog_interp(np.array([t]), mx, my)[0]
    # Past the measurements the layers stay compute-bound, so time grows linearly with tokens:
    # extend two octaves with a straight line fitted to the top measured octave.
    top = mx >= mx[-1] / 2
    beta, alpha = np.polyfit(mx[top], my[top], 1)
    far = mx[-1] * 2.0 ** (np.arange(1, 9) / 4)
    knots = np.concatenate([knots, np.round(far)])
    vals = monotone(np.concatenate([vals, alpha + beta * far]))
    fit = ape_stats(loglog_interp(mx, knots, vals), my)
    return shapes, knots, vals, fit, mx, my


def gemm_lookup(path: Path) -> dict[tuple[int, int, int], float]:
    return {
        (int(r["m"]), int(r["n"]), int(r["k"])): float(r["latency"])
        for r in read_csv(path)
        if r["gemm_dtype"] == "bfloat16"
    }


def gemm_at(g: dict[tuple[int, int, int], float], m: int, n: int, k: int) -> float:
    """GEMM time at an unmeasured width ``n``: linear in n between the measured columns.

    A GEMM streams its n x k weight once and does m*n*k MACs, so at fixed (m, k) its time is
    linear in n; the measured grid lacks Llama's vocabulary sizes. Beyond the last column the
    last segment is extended.
    """
    ns = sorted(key[1] for key in g if key[0] == m and key[2] == k)
    if not ns:
        raise KeyError(f"no GEMM measured at m={m}, k={k}")
    if n in ns:
        return g[(m, n, k)]
    above = [v for v in ns if v > n]
    lo, hi = (max(v for v in ns if v < n), above[0]) if above else (ns[-2], ns[-1])
    return g[(m, lo, k)] + (g[(m, hi, k)] - g[(m, lo, k)]) * (n - lo) / (hi - lo)


def lm_head_table(
    g: dict[tuple[int, int, int], float], shapes: Shapes
) -> tuple[FloatArray, FloatArray, dict[str, Any]]:
    ms = np.array(sorted({key[0] for key in g}), dtype=np.float64)
    vals = monotone(np.array([gemm_at(g, int(m), shapes.vocab_size, shapes.n_embd) for m in ms]))
    # Check of the n-interpolation where it can be checked: rebuild the measured n=16384 column
    # from its neighbours 12288 and 65536.
    check = np.array(
        [
            g[(int(m), 12288, 4096)]
            + (g[(int(m), 65536, 4096)] - g[(int(m), 12288, 4096)]) * (16384 - 12288) / 53248
            for m in ms
        ]
    )
    meas = np.array([g[(int(m), 16384, 4096)] for m in ms])
    fit = {"n_interpolation_check_at_n16384": ape_stats(check, meas)}
    return ms, vals, fit


def attention_rows(path: Path, n_head: int, n_kv_head: int) -> list[dict[str, str]]:
    return [
        r
        for r in read_csv(path)
        if int(r["num_heads"]) == n_head
        and int(r["num_key_value_heads"]) == n_kv_head
        and r["kv_cache_dtype"] == "bfloat16"
    ]


def prefill_attention_table(
    path: Path, shapes: Shapes, n_layers: int
) -> tuple[FloatArray, FloatArray, dict[str, Any], str]:
    rows = attention_rows(path, shapes.n_head, shapes.n_kv_head)
    per: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if r["batch_size"] == "1":
            per[int(r["isl"])].append(float(r["latency"]))
    xs = np.array(sorted(per), dtype=np.float64)
    ys = np.array([statistics.median(per[int(x)]) for x in xs]) * n_layers
    fit = {"leave_one_out": loo_stats(xs, ys)}
    return xs, monotone(ys), fit, rows[0]["device"]


def decode_attention_grid(
    path: Path, shapes: Shapes, n_layers: int
) -> tuple[FloatArray, FloatArray, FloatArray, dict[str, Any]]:
    """Decode attention vs (batch, KV length), in the model's own batch units, all layers.

    The table has only 8-KV-head shapes. Attention heads are independent, so B sequences with
    H KV heads move the same KV bytes and do the same FLOPs as B*H/8 sequences with 8 KV heads
    (and as many query heads per KV head); that maps Llama-2's 32 KV heads onto the 8/8 table.
    """
    factor = shapes.n_kv_head // 8
    q_heads = shapes.n_head // factor
    rows = attention_rows(path, q_heads, 8)
    meas: dict[tuple[int, int], float] = {}
    for r in rows:
        b = int(r["batch_size"])
        if b % factor == 0:
            meas[(b // factor, int(r["step"]))] = float(r["latency"]) * n_layers
    bs = np.array(sorted({k[0] for k in meas}), dtype=np.float64)
    ls = np.array(sorted({k[1] for k in meas}), dtype=np.float64)
    z = np.full((len(bs), len(ls)), np.nan)
    for (b, lv), t in meas.items():
        z[np.searchsorted(bs, b), np.searchsorted(ls, lv)] = t
    filled = 0
    for i in range(len(bs)):
        known = np.flatnonzero(~np.isnan(z[i]))
        j1, j2 = known[-2], known[-1]
        slope = (z[i, j2] - z[i, j1]) / (ls[j2] - ls[j1])
        for j in range(j2 + 1, len(ls)):
            # Large batch x long KV was not measured (it exceeds the GPU's memory); decode
            # attention is bandwidth-bound there, i.e. linear in KV length.
            z[i, j] = z[i, j2] + slope * (ls[j] - ls[j2])
            filled += 1
    for i in range(len(bs)):
        z[i] = monotone(z[i])
    for j in range(len(ls)):
        z[:, j] = monotone(z[:, j])
    loo_kv, loo_b = [], []
    for (b, lv), t in meas.items():
        i, j = int(np.searchsorted(bs, b)), int(np.searchsorted(ls, lv))
        if 0 < j < len(ls) - 1 and (b, int(ls[j + 1])) in meas:
            loo_kv.append(
                (loglog_interp(ls[j : j + 1], ls[[j - 1, j + 1]], z[i, [j - 1, j + 1]])[0], t)
            )
        if 0 < i < len(bs) - 1 and (int(bs[i + 1]), lv) in meas:
            loo_b.append(
                (loglog_interp(bs[i : i + 1], bs[[i - 1, i + 1]], z[[i - 1, i + 1], j])[0], t)
            )
    fit = {
        "table_shape": f"{q_heads} query / 8 KV heads at batch x{factor}",
        "cells_extrapolated_linear_in_kv": filled,
        "cells_measured": len(meas),
        "leave_one_out_along_kv": ape_stats(*map(np.array, zip(*loo_kv, strict=True))),
        "leave_one_out_along_batch": ape_stats(*map(np.array, zip(*loo_b, strict=True))),
    }
    return bs, ls, z, fit


def kv_cache(shapes: Shapes, n_layers: int, gpu: GpuSpec) -> dict[str, Any]:
    head_dim = shapes.n_embd // shapes.n_head
    bytes_per_token = 2 * n_layers * shapes.n_kv_head * head_dim * 2  # K and V, bf16
    per_layer = (
        shapes.n_embd * head_dim * (shapes.n_head * 2 + shapes.n_kv_head * 2)
        + 3 * shapes.n_embd * shapes.n_expanded_embd
        + 2 * shapes.n_embd
    )
    params = n_layers * per_layer + 2 * shapes.vocab_size * shapes.n_embd + shapes.n_embd
    budget = GPU_MEMORY_UTILIZATION * gpu.memory_gib * GIB - 2 * params - RESERVED_GIB * GIB
    blocks = int(budget // (bytes_per_token * BLOCK_SIZE))
    return {
        "capacity_tokens": blocks * BLOCK_SIZE,
        "bytes_per_token": bytes_per_token,
        "params": params,
        "assumption": (
            f"vLLM sizing: {GPU_MEMORY_UTILIZATION} x {gpu.memory_gib} GiB, minus bf16 weights "
            f"({2 * params / GIB:.2f} GiB from the layer shapes), minus {RESERVED_GIB} GiB for "
            f"CUDA context, workspaces and CUDA graphs; {BLOCK_SIZE}-token blocks, bf16 KV."
        ),
    }


# ----------------------------------------------------------------------------- overhead fit


def bench_rows(data: Path, gpu: GpuSpec, model: ModelSpec) -> list[tuple[int, int, float]]:
    return [
        (int(r["Input Output Length"]), int(r["Batch Size"]), float(r["Latency"]) * 1000)
        for r in read_csv(data / "llm-inference-bench" / "All_results.csv")
        if r["Hardware"] == gpu.bench_hardware
        and r["Framework"] == "vLLM"
        and r["Model"] == model.hf_name
        and r["Num of Hardware"] == "1"
    ]


def static_batch_ms(p: GpuProfile, length: int, batch: int, chunk: int) -> tuple[float, int]:
    """Kernel time of a static batch of ``batch`` prompts of ``length`` in, ``length`` out."""
    per_pass = max(1, chunk // length)
    passes = math.ceil(batch / per_pass)
    prefill = 0.0
    for k in range(passes):
        seqs = min(per_pass, batch - k * per_pass)
        prefill += float(
            p.linear_ms(seqs * length)
            + seqs * p.prefill_attention_ms(length, 0)
            + p.lm_head_ms(seqs)
        )
    kv = np.arange(length + 1, 2 * length, dtype=np.float64)
    decode = float(
        np.sum(p.linear_ms(batch) + p.decode_attention_ms(batch, kv) + p.lm_head_ms(batch))
    )
    return prefill + decode, passes + length - 1


def fit_overhead(
    p: GpuProfile, rows: list[tuple[int, int, float]], model: ModelSpec
) -> tuple[float, float, dict[str, Any], list[tuple[int, int, float, float, bool]]]:
    """Per-iteration overhead a + b*seqs = what whole-model timings add to the kernel sum.

    Only rows whose whole batch KV (B x 2L tokens) fits 16k tokens are fitted, so that no
    preemption or swapping is folded into the overhead whatever the benchmark GPU's memory.
    """
    base, steps, use = [], [], []
    for length, batch, _ in rows:
        b, s = static_batch_ms(p, length, batch, model.max_model_len)
        base.append(b)
        steps.append(s)
        use.append(batch * 2 * length <= 16384)
    meas_a = np.array([r[2] for r in rows])
    base_a, steps_a = np.array(base), np.array(steps, dtype=np.float64)
    batch_a = np.array([r[1] for r in rows], dtype=np.float64)
    m = np.array(use)
    w = 1.0 / meas_a[m]
    design = np.c_[steps_a[m], steps_a[m] * batch_a[m]] * w[:, None]
    coef, *_ = np.linalg.lstsq(design, (meas_a[m] - base_a[m]) * w, rcond=None)
    a, b = float(coef[0]), float(coef[1])
    if b < 0:  # a per-sequence cost cannot be negative: refit the constant alone
        b = 0.0
        a = float(
            np.sum((meas_a[m] - base_a[m]) * w * steps_a[m] * w) / np.sum((steps_a[m] * w) ** 2)
        )
    a = max(a, 0.0)
    pred = base_a + steps_a * (a + b * batch_a)
    fit = {
        "method": "weighted least squares of (measured - kernel sum) on iterations",
        "fitted_rows": ape_stats(pred[m], meas_a[m]),
        "all_rows": ape_stats(pred, meas_a),
    }
    table = [
        (r[0], r[1], r[2], float(pq), bool(u)) for r, pq, u in zip(rows, pred, use, strict=True)
    ]
    return a, b, fit, table


# ----------------------------------------------------------------------------- workload


def quantile_grid() -> FloatArray:
    # Dense in the tails: the long prompts are the ones that stress extrapolation.
    return np.unique(
        np.concatenate(
            [
                np.linspace(0, 0.95, 96),
                np.linspace(0.95, 0.995, 10),
                np.array([0.996, 0.997, 0.998, 0.999, 0.9995, 0.9999, 1.0]),
            ]
        ).round(6)
    )


def workload(data: Path) -> dict[str, Any]:
    ctx: list[int] = []
    gen: list[int] = []
    rels = [f"azure-llm-2023/AzureLLMInferenceTrace_{k}.csv" for k in ("code", "conv")]
    for rel in rels:
        for r in read_csv(data / rel):
            ctx.append(int(r["ContextTokens"]))
            gen.append(int(r["GeneratedTokens"]))
    hits: list[float] = []
    moon = [f"mooncake/{k}_trace.jsonl" for k in ("conversation", "synthetic")]
    for rel in moon:
        seen: set[int] = set()
        with (data / rel).open(encoding="utf-8") as f:
            for line in f:
                req = json.loads(line)
                run = 0
                for block in req["hash_ids"]:
                    if block not in seen:
                        break
                    run += 1
                hits.append(min(512 * run, req["input_length"]) / req["input_length"])
                seen.update(req["hash_ids"])
    u = quantile_grid()
    out = np.asarray(gen, dtype=np.float64)
    return {
        "kind": "workload",
        "name": "workload",
        "prompt_tokens": {
            "what": "ContextTokens of the Azure 2023 code and conv traces, pooled",
            "q": sigs(u, 6),
            "tokens": [int(v) for v in np.quantile(np.asarray(ctx), u, method="inverted_cdf")],
        },
        "output_tokens": {
            "what": "GeneratedTokens of the same traces, pooled",
            "q": sigs(u, 6),
            "tokens": [int(v) for v in np.quantile(out, u, method="inverted_cdf")],
            "mean": sig(float(out.mean()), 4),
            # A running request seen at a random instant is further from done than average
            # (inspection paradox): its mean remaining output is E[X^2] / (2 E[X]).
            "mean_residual": sig(float((out**2).mean() / (2 * out.mean())), 4),
        },
        "prefix_hit": {
            "what": (
                "leading-run prefix-cache hit ratio per request with an unbounded cache, "
                "Mooncake conversation + synthetic traces pooled (512-token blocks)"
            ),
            "q": sigs(u, 6),
            "ratio": sigs(np.quantile(np.asarray(hits), u, method="inverted_cdf"), 4),
        },
        "source": [source_entry(data, rel) for rel in rels + moon],
    }


# ----------------------------------------------------------------------------- sanity


def splitwise_prefill(data: Path, hardware: str) -> dict[int, float]:
    """Median batch-1 prompt time of Llama-2-70B at TP2, by prompt size."""
    per: dict[int, list[float]] = defaultdict(list)
    for r in read_csv(data / "splitwise-sim" / "perf_model.csv"):
        if (
            r["model"] == "llama2-70b"
            and r["hardware"] == hardware
            and r["tensor_parallel"] == "2"
            and r["batch_size"] == "1"
        ):
            per[int(r["prompt_size"])].append(float(r["prompt_time"]))
    return {k: statistics.median(v) for k, v in per.items()}


LLAMA2_70B_NON_EMBEDDING_PARAMS = 68.45e9  # 80 x (2*8192^2 + 2*8192*1024 + 3*8192*28672)


def sanity(data: Path, profiles: dict[str, GpuProfile], params: dict[str, int]) -> dict[str, Any]:
    print("\n== sanity: idle prefill (ms) vs Splitwise Llama-2-70B TP2 scaled by linear FLOPs")
    print(
        "   (scaled = 70B time x our non-embedding params / (70B params / 2 GPUs); a rough check:"
    )
    print("    TP all-reduce and attention shapes differ)")
    out: dict[str, Any] = {}
    for name, p in profiles.items():
        gpu = GPUS[name.split("-")[0]]
        sw = splitwise_prefill(data, gpu.splitwise)
        scale = params[name] / (LLAMA2_70B_NON_EMBEDDING_PARAMS / 2)
        rows = {}
        for n in (128, 512, 1024, 2048, 4096, 8192):
            ours = float(p.prefill_ms(n, 0))
            ref = sw.get(n, float("nan")) * scale
            rows[n] = (sig(ours, 4), sig(ref, 4))
            print(f"   {name:16s} prompt {n:5d}: ours {ours:8.1f}   splitwise-scaled {ref:8.1f}")
        out[name] = {"prefill_ms_vs_splitwise_scaled": rows}
    print("\n== sanity: decode step (ms) by batch size at mean KV 512 / 2048 tokens")
    for name, p in profiles.items():
        cells = []
        for b in (1, 8, 32, 64, 128, 256):
            short, long = float(p.decode_step_ms(b, 512)), float(p.decode_step_ms(b, 2048))
            cells.append(f"B{b}: {short:.1f}/{long:.1f}")
        print(f"   {name:16s} " + "  ".join(cells))
        out[name]["decode_step_ms_b1_kv512"] = sig(float(p.decode_step_ms(1, 512)), 4)
    return out


# ----------------------------------------------------------------------------- main


def build(data: Path, gpu: GpuSpec, model: ModelSpec) -> tuple[dict[str, Any], int]:
    name = f"{gpu.key}-{model.key}"
    vidur_rel = f"vidur/compute/{gpu.vidur}/{model.hf_name}/mlp.csv"
    aic = f"aiconfigurator/{gpu.aic}"
    ctx_rel = f"{aic}/attention/vllm/0.14.0/context_attention_perf.csv"
    gen_rel = f"{aic}/attention/vllm/0.14.0/generation_attention_perf.csv"
    gemm_rel = f"{aic}/gemm/vllm/0.14.0/gemm_perf.csv"
    shapes, lx, ly, lfit, _, _ = linear_table(data / vidur_rel, model.n_layers)
    gemm = gemm_lookup(data / gemm_rel)
    hx, hy, hfit = lm_head_table(gemm, shapes)
    px, py, pfit, device = prefill_attention_table(data / ctx_rel, shapes, model.n_layers)
    db, dl, dz, dfit = decode_attention_grid(data / gen_rel, shapes, model.n_layers)
    kv = kv_cache(shapes, model.n_layers, gpu)
    profile: dict[str, Any] = {
        "kind": "gpu_profile",
        "schema": 1,
        "name": name,
        "generated_by": "bench/tools/derive_profiles.py",
        "gpu": {"device": device, "memory_gib": gpu.memory_gib},
        "model": {
            "name": model.hf_name,
            "n_layers": model.n_layers,
            "n_head": shapes.n_head,
            "n_kv_head": shapes.n_kv_head,
            "head_dim": shapes.n_embd // shapes.n_head,
            "n_embd": shapes.n_embd,
            "n_expanded_embd": shapes.n_expanded_embd,
            "vocab_size": shapes.vocab_size,
            "params": kv.pop("params"),
            "max_model_len": model.max_model_len,
            "tensor_parallel": 1,
        },
        "serving": {
            "engine": "vLLM, chunked prefill, `vllm serve` defaults",
            "max_num_batched_tokens": gpu.max_num_batched_tokens,
            "max_num_seqs": gpu.max_num_seqs,
            "gpu_memory_utilization": GPU_MEMORY_UTILIZATION,
            "block_size": BLOCK_SIZE,
        },
        "kv_cache": kv,
        "tables": {
            "linear": {
                "what": "ms per forward pass, all non-attention layers + embedding, vs tokens",
                "from": vidur_rel,
                "x": sigs(lx),
                "ms": sigs(ly),
                "fit": {"vs_measured": lfit},
            },
            "lm_head": {
                "what": f"ms of the vocabulary GEMM (n={shapes.vocab_size}, k={shapes.n_embd})"
                " vs sampled rows",
                "from": gemm_rel,
                "x": sigs(hx),
                "ms": sigs(hy),
                "fit": hfit,
            },
            "prefill_attention": {
                "what": "ms of causal prefill attention of one sequence, all layers, vs length",
                "from": ctx_rel,
                "x": sigs(px),
                "ms": sigs(py),
                "fit": pfit,
            },
            "decode_attention": {
                "what": "ms of decode attention, all layers, vs (batch, KV tokens per sequence)",
                "from": gen_rel,
                "batch": sigs(db),
                "kv_tokens": sigs(dl),
                "ms": [sigs(row) for row in dz],
                "fit": dfit,
            },
        },
        "step_overhead": {"ms": 0.0, "per_seq_ms": 0.0},
        "assumptions": {
            "kv_capacity": kv["assumption"],
            "serving": "vLLM defaults for `vllm serve` on this GPU (EngineArgs batch defaults)",
            "attention_per_sequence": "batched prefills cost the sum of per-sequence attention",
        },
        "source": [
            source_entry(data, rel)
            for rel in (
                vidur_rel,
                gemm_rel,
                ctx_rel,
                gen_rel,
                "llm-inference-bench/All_results.csv",
                "splitwise-sim/perf_model.csv",
            )
        ],
    }
    return profile, int(profile["model"]["params"]) - 2 * shapes.vocab_size * shapes.n_embd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Derive backend/sim/profiles/ from measured data.")
    parser.add_argument("data", nargs="?", default=str(REPO_ROOT.parent / "shared" / "data"))
    parser.add_argument("--out", default=str(OUT_DIR))
    args = parser.parse_args(argv)
    data, out = Path(args.data).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    profiles: dict[str, GpuProfile] = {}
    non_emb: dict[str, int] = {}
    docs: dict[str, dict[str, Any]] = {}
    for gkey, mkey in PROFILES:
        gpu, model = GPUS[gkey], MODELS[mkey]
        doc, non_emb_params = build(data, gpu, model)
        name = doc["name"]
        a, b, ofit, table = fit_overhead(
            GpuProfile.from_json(doc), bench_rows(data, gpu, model), model
        )
        doc["step_overhead"] = {
            "ms": sig(a, 4),
            "per_seq_ms": sig(b, 4),
            "what": (
                "framework time per iteration (scheduling, sampling, launch gaps) fitted as the "
                "gap between vLLM whole-model batch latency (llm-inference-bench) and the kernel "
                "sum; it also absorbs any speed difference of the benchmark's machine"
            ),
            "fit": ofit,
        }
        docs[name], non_emb[name] = doc, non_emb_params
        profiles[name] = GpuProfile.from_json(doc)
        report(doc, model, table)
    checks = sanity(data, profiles, non_emb)
    for name, doc in docs.items():
        doc["sanity"] = checks[name]
        write(out / f"{name}.json", doc)
    write(out / "workload.json", workload(data))
    copy_licences(data, out / "licenses")
    print(f"\nwrote {len(docs)} profiles and workload.json to {out}")
    return 0


def report(
    doc: dict[str, Any], model: ModelSpec, bench: list[tuple[int, int, float, float, bool]]
) -> None:
    t, kv = doc["tables"], doc["kv_cache"]
    dfit, over = t["decode_attention"]["fit"], doc["step_overhead"]
    print(f"\n== {doc['name']}  ({doc['gpu']['device']}, {model.hf_name}, TP1)")
    print(
        f"   KV capacity {kv['capacity_tokens']} tokens, {kv['bytes_per_token'] // 1024} KiB/token"
    )
    lines = {
        "linear table vs vidur points": t["linear"]["fit"]["vs_measured"],
        "prefill attention leave-one-out": t["prefill_attention"]["fit"]["leave_one_out"],
        "decode attention LOO along KV": dfit["leave_one_out_along_kv"],
        "decode attention LOO along batch": dfit["leave_one_out_along_batch"],
        "lm_head n-interpolation check": t["lm_head"]["fit"]["n_interpolation_check_at_n16384"],
        "step overhead, fitted bench rows": over["fit"]["fitted_rows"],
    }
    for label, stats in lines.items():
        print(f"   {label + ':':34s} {fmt(stats)}")
    print(
        f"   decode table: {dfit['table_shape']}, {dfit['cells_extrapolated_linear_in_kv']} cells"
    )
    print(f"   extrapolated; step overhead {over['ms']} ms + {over['per_seq_ms']} ms per sequence")
    print("   llm-inference-bench vLLM static batches (L in, L out): latency s measured / ours")
    # The benchmark does not say which A100 it ran on; rows whose KV would overflow a 40 GB part
    # are marked too, since preemption would explain a miss there.
    cap40 = kv["capacity_tokens"] - int(GPU_MEMORY_UTILIZATION * 40 * GIB) // kv["bytes_per_token"]
    print("   (fit = used for the overhead; * = B x 2L tokens exceed this profile's KV capacity,")
    print(f"    + = exceed it on a 40 GB card ({cap40} tokens): vLLM then preempts and recomputes,")
    print("    which a kernel sum does not model)")
    for length, batch, meas, pred, used in bench:
        need = batch * 2 * length
        flag = (
            "fit" if used else "*" if need > kv["capacity_tokens"] else "+" if need > cap40 else ""
        )
        print(
            f"     L={length:5d} B={batch:3d} {flag:3s} {meas / 1000:8.2f} / {pred / 1000:8.2f}"
            f"  ({100 * (pred / meas - 1):+6.1f} %)"
        )


def fmt(s: dict[str, Any]) -> str:
    return (
        f"MAPE {s['mape_pct']:.2f} %, p90 {s['p90_ape_pct']:.2f} %, max {s['max_ape_pct']:.2f} %"
        f" (n={s['n_points']})"
    )


def copy_licences(data: Path, dest: Path) -> None:
    """Derived data ships with the upstream licence texts, as the licences require."""
    dest.mkdir(exist_ok=True)
    for folder, (_, _, _, licence_file) in UPSTREAM.items():
        text = (data / folder / licence_file).read_text(encoding="utf-8")
        (dest / f"LICENSE-{folder}.txt").write_text(text, encoding="utf-8")


def write(path: Path, doc: dict[str, Any]) -> None:
    text = json.dumps(doc, indent=1)
    # One line per numeric list keeps the tables readable and the files small.
    text = re.sub(
        r"\[\s*([-+0-9.eE,\s]+?)\s*\]", lambda m: "[" + " ".join(m[1].split()) + "]", text
    )
    path.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
