"""Properties of the profile-shaped latency model (shipped JSON only; no raw data needed)."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest

from backend.sim.gpu import GpuProfile, available_profiles, load_profile, profiles_dir
from backend.sim.latency import Array, sample_rows, true_latency

PROFILES = available_profiles()


def rows(n: int, **overrides: Any) -> dict[str, Array]:
    """A moderately loaded pod, broadcast to ``n`` rows, with some fields overridden."""
    base: dict[str, Any] = {
        "kv_cache_percentage": 0.2,
        "input_token_length": 1000,
        "num_request_waiting": 0,
        "num_request_running": 8,
        "prefix_cache_score": 0.0,
        "prefill_tokens_in_flight": 0,
        "decode_tokens_in_flight": 0,
        "num_tokens_generated": 10,
    } | overrides
    return {k: np.broadcast_to(np.asarray(v), (n,)).copy() for k, v in base.items()}


@pytest.fixture(params=PROFILES)
def profile(request: pytest.FixtureRequest) -> GpuProfile:
    return load_profile(request.param)


def test_required_profiles_ship() -> None:
    assert {"a100-llama2-7b", "h100-llama2-7b"} <= set(PROFILES)
    assert any(p.startswith("a100-") for p in PROFILES)


def test_profile_records_source_and_licence(profile: GpuProfile) -> None:
    assert profile.kv_capacity_tokens > 10_000
    assert profile.n_layers == 32
    assert len(profile.source) >= 4
    for src in profile.source:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", src.repository)
        assert re.fullmatch(r"[0-9a-f]{40}", src.commit)
        assert src.license in {"MIT", "Apache-2.0", "BSD-3-Clause", "CC-BY-4.0"}
    raw = json.loads((profiles_dir() / f"{profile.name}.json").read_text(encoding="utf-8"))
    for src in raw["source"]:
        assert (profiles_dir() / src["license_file"]).is_file()
    assert (profiles_dir() / "NOTICE.md").is_file()
    assert profile.fit["linear"]["vs_measured"]["mape_pct"] < 10


def test_workload_table_records_source() -> None:
    raw = json.loads((profiles_dir() / "workload.json").read_text(encoding="utf-8"))
    licences = {s["license"] for s in raw["source"]}
    assert licences == {"CC-BY-4.0", "Apache-2.0"}
    assert all((profiles_dir() / s["license_file"]).is_file() for s in raw["source"])


def test_unknown_profile_is_an_error() -> None:
    with pytest.raises(KeyError):
        load_profile("tpu-nonexistent")


@pytest.mark.parametrize(
    "state",
    [
        {"num_request_running": 0, "kv_cache_percentage": 0.0},
        {},
        {"prefix_cache_score": 0.5, "num_request_waiting": 2, "prefill_tokens_in_flight": 3000},
    ],
)
def test_ttft_strictly_increasing_in_input_length(
    profile: GpuProfile, state: dict[str, Any]
) -> None:
    # From 2 tokens: below that a 50 % hit still leaves the one token vLLM always recomputes.
    inp = np.unique(np.concatenate([np.arange(2, 64), np.geomspace(64, 16384, 200).round()]))
    ttft, _ = true_latency(rows(len(inp), input_token_length=inp, **state), profile)
    assert np.all(np.diff(ttft) > 0)


def test_ttft_strictly_increasing_in_prefill_tokens_in_flight(profile: GpuProfile) -> None:
    # Across a chunk boundary too: the default row has 8 running requests and 1000 own tokens,
    # so at `edge` queued tokens the prefill work first needs a second iteration.
    edge = profile.max_num_batched_tokens - 8 - 1000
    queued = np.unique([0, 1, 100, 500, edge - 1, edge, edge + 1, 3 * edge, 20_000, 60_000])
    ttft, _ = true_latency(
        rows(len(queued), num_request_waiting=3, prefill_tokens_in_flight=queued), profile
    )
    assert np.all(np.diff(ttft) > 0)
    assert ttft[queued == edge + 1] - ttft[queued == edge] > 1.0  # one more iteration


def test_prefix_hits_reduce_ttft(profile: GpuProfile) -> None:
    prefix = np.linspace(0.0, 1.0, 21)
    ttft, _ = true_latency(
        rows(len(prefix), input_token_length=4096, prefix_cache_score=prefix), profile
    )
    assert np.all(np.diff(ttft) < 0)
    assert ttft[-3] < 0.5 * ttft[0]
    # Attention over the cached prefix still costs: a 90 % hit on 4096 tokens is dearer than a
    # fresh prompt of the 410 uncached tokens.
    fresh, _ = true_latency(rows(1, input_token_length=410), profile)
    hit, _ = true_latency(rows(1, input_token_length=4096, prefix_cache_score=0.9), profile)
    assert hit[0] > fresh[0]


def test_tpot_increasing_in_batch_size(profile: GpuProfile) -> None:
    running = np.array([0, 1, 2, 4, 8, 16, 32, 48, 64])
    kv = running * 1200 / profile.kv_capacity_tokens
    _, tpot = true_latency(
        rows(len(running), num_request_running=running, kv_cache_percentage=kv), profile
    )
    assert np.all(np.diff(tpot) > 0)
    batch = np.array([1, 2, 4, 8, 16, 64, 128, 256])
    assert np.all(np.diff(profile.decode_step_ms(batch, 1000)) > 0)


def test_tpot_grows_with_kv_and_queued_prefill(profile: GpuProfile) -> None:
    kv = np.linspace(0.0, 0.9, 10)
    _, tpot = true_latency(rows(len(kv), kv_cache_percentage=kv, num_request_running=32), profile)
    assert np.all(np.diff(tpot) > 0)
    queued = np.array([0, 500, 5000, 50_000])
    _, tpot = true_latency(rows(4, num_request_waiting=2, prefill_tokens_in_flight=queued), profile)
    assert np.all(np.diff(tpot) > 0)


def test_ttft_superlinear_for_long_prompts(profile: GpuProfile) -> None:
    inp = np.array([1024, 2048, 4096, 8192])
    ttft, _ = true_latency(rows(4, input_token_length=inp, num_request_running=0), profile)
    slope_short = (ttft[1] - ttft[0]) / 1024
    slope_long = (ttft[3] - ttft[2]) / 4096
    assert slope_long > 1.05 * slope_short
    # The attention share of a single prefill pass grows with the prompt.
    n = np.array([1024.0, 4096.0, 16384.0])
    share = profile.prefill_attention_ms(n, 0) / profile.prefill_ms(n, 0)
    assert np.all(np.diff(share) > 0)


def test_magnitudes_match_measured_whole_model_numbers() -> None:
    a100 = load_profile("a100-llama2-7b")
    h100 = load_profile("h100-llama2-7b")
    # Prefill of 1-2k tokens on an A100 takes ~100-200 ms for a 7B model; decode ~10-20 ms.
    assert 50 < float(a100.prefill_ms(1024)) < 150
    assert 100 < float(a100.prefill_ms(2048)) < 250
    assert 10 < float(a100.decode_step_ms(1, 512)) < 20
    for n in (512, 4096):
        assert float(h100.prefill_ms(n)) < float(a100.prefill_ms(n))
    for b in (1, 64):
        assert float(h100.decode_step_ms(b, 1000)) < float(a100.decode_step_ms(b, 1000))


def test_idle_pod_is_one_prefill(profile: GpuProfile) -> None:
    inp = np.array([100, profile.max_num_batched_tokens])
    ttft, _ = true_latency(rows(2, input_token_length=inp, num_request_running=0), profile)
    assert np.allclose(ttft, profile.prefill_ms(inp))


@pytest.mark.parametrize(("lo", "hi"), [(1, 1024), (1025, 2048), (2049, None), (8192, None)])
def test_sampler_respects_token_bounds(lo: int, hi: int | None) -> None:
    p = load_profile("a100-llama2-7b")
    got = sample_rows(4000, np.random.default_rng(1), p, min_input_tokens=lo, max_input_tokens=hi)
    inp = got["input_token_length"]
    assert inp.min() >= lo
    assert hi is None or inp.max() <= hi
    assert inp.max() >= (hi or lo) * 0.9
    if lo == 2049:
        assert inp.max() > 7000


def test_sampler_rejects_bad_bounds() -> None:
    p = load_profile("a100-llama2-7b")
    with pytest.raises(ValueError):
        sample_rows(10, np.random.default_rng(0), p, min_input_tokens=500, max_input_tokens=100)


def test_sampler_is_reproducible(profile: GpuProfile) -> None:
    a = sample_rows(500, np.random.default_rng(7), profile)
    b = sample_rows(500, np.random.default_rng(7), profile)
    c = sample_rows(500, np.random.default_rng(8), profile)
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["actual_ttft_ms"], c["actual_ttft_ms"])


def test_sampler_rows_are_consistent_and_cover_regimes(profile: GpuProfile) -> None:
    r = sample_rows(20_000, np.random.default_rng(3), profile)
    kv, run, wait = r["kv_cache_percentage"], r["num_request_running"], r["num_request_waiting"]
    assert np.all((kv >= 0) & (kv <= 1))
    assert np.all(run <= profile.max_num_seqs)
    assert np.all((run == 0) == (kv == 0))
    assert np.allclose(r["decode_tokens_in_flight"], kv * profile.kv_capacity_tokens, atol=1)
    assert np.mean(run == 0) > 0.1  # idle pods
    assert np.mean((wait > 0) & ((kv > 0.9) | (run == profile.max_num_seqs))) > 0.02  # saturated
    assert np.mean(kv > 0.5) > 0.05
    prefix = r["prefix_cache_score"]
    assert np.mean(prefix == 0) > 0.05 and np.mean(prefix > 0.9) > 0.1
    assert r["input_token_length"].max() > 7000
    ttft, tpot = true_latency(r, profile)
    assert np.array_equal(ttft, r["ttft_true_ms"]) and np.array_equal(tpot, r["tpot_true_ms"])
    assert np.all(np.isfinite(ttft)) and np.all(ttft > 0) and np.all(tpot > 0)


def test_sampler_noise_is_multiplicative_lognormal() -> None:
    p = load_profile("a100-llama2-7b")
    r = sample_rows(20_000, np.random.default_rng(5), p, noise=0.05)
    log_ratio = np.log(r["actual_ttft_ms"] / r["ttft_true_ms"])
    assert abs(log_ratio.std() - 0.05) < 0.003 and abs(log_ratio.mean()) < 0.003
    exact = sample_rows(100, np.random.default_rng(5), p, noise=0.0)
    assert np.array_equal(exact["actual_tpot_ms"], exact["tpot_true_ms"])
