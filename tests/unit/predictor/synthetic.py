"""A small synthetic serving-latency generator for the predictor tests.

TTFT has a superlinear prompt cost (launch-bound flat for short prompts, then linear, plus
attention quadratic in the uncached tokens), a queueing term, decode interference and two effects
the linear base cannot express (a KV pressure knee and a slower pod type), so both halves of the
hybrid model have work to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Batch:
    cols: dict[str, npt.NDArray[np.float64]]
    ttft_true: Array
    tpot_true: Array
    ttft: Array
    tpot: Array


def true_ttft(cols: dict[str, Array]) -> Array:
    prompt, prefix = cols["input_token_length"], cols["prefix_cache_score"]
    uncached = prompt * (1.0 - prefix)
    cached = prompt - uncached
    running = cols["num_request_running"]
    # Short prefills are launch-bound (flat), long ones compute-bound (0.06 ms a token).
    linear = np.sqrt(6.0**2 + (0.06 * uncached) ** 2)
    attention = 0.006 * uncached * (cached + 0.5 * uncached) * 1e-3
    ms = (
        10.0
        + linear
        + attention
        + 0.045 * cols["prefill_tokens_in_flight"]
        + 3.0 * cols["num_request_waiting"]
        + 0.25 * running
        + 1e-4 * running * uncached
        + 200.0 * np.maximum(cols["kv_cache_percentage"] - 0.85, 0.0)
    )
    slow_pod = np.where(cols["pod_type"] == 2, 1.15, 1.0)
    return np.asarray(ms * slow_pod, dtype=np.float64)


def true_tpot(cols: dict[str, Array]) -> Array:
    ms = (
        6.0
        + 0.12 * cols["num_request_running"]
        + 2e-4 * cols["decode_tokens_in_flight"]
        + 1e-3 * cols["prefill_tokens_in_flight"]
        + 5e-4 * (cols["input_token_length"] + cols["num_tokens_generated"])
    )
    knee = 1.0 + 1.5 * np.maximum(cols["kv_cache_percentage"] - 0.9, 0.0)
    return np.asarray(ms * knee, dtype=np.float64)


def sample(
    n: int,
    rng: np.random.Generator,
    *,
    min_input: int = 32,
    max_input: int = 1024,
    max_running: int = 48,
    noise: float = 0.03,
) -> Batch:
    prompt = np.floor(np.exp(rng.uniform(np.log(min_input), np.log(max_input + 1), n)))
    prefix = np.where(rng.random(n) < 0.4, 0.0, rng.uniform(0.0, 0.95, n))
    running = rng.integers(0, max_running + 1, n).astype(np.float64)
    waiting = np.where(rng.random(n) < 0.6, 0, rng.integers(1, 9, n)).astype(np.float64)
    decode_tokens = np.floor(running * rng.uniform(200, 1500, n))
    cols = {
        "kv_cache_percentage": np.clip(decode_tokens / 60000 + rng.normal(0, 0.03, n), 0, 1),
        "input_token_length": prompt,
        "num_request_waiting": waiting,
        "num_request_running": running,
        "prefix_cache_score": prefix,
        "prefill_tokens_in_flight": np.floor(rng.uniform(0, 1, n) * (waiting + 1) * 600),
        "decode_tokens_in_flight": decode_tokens,
        "num_tokens_generated": rng.integers(1, 400, n).astype(np.float64),
        "pod_type": rng.integers(0, 3, n).astype(np.float64),
        "encoder_input_size": np.zeros(n),
        "encoder_matched_size": np.zeros(n),
    }
    ttft, tpot = true_ttft(cols), true_tpot(cols)
    return Batch(
        cols=cols,
        ttft_true=ttft,
        tpot_true=tpot,
        ttft=ttft * rng.lognormal(0.0, noise, n),
        tpot=tpot * rng.lognormal(0.0, noise, n),
    )
