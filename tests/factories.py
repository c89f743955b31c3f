"""Valid wire entries for tests; override any field."""

from __future__ import annotations

from typing import Any


def entry(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "kv_cache_percentage": 0.42,
        "input_token_length": 1830,
        "num_request_waiting": 0,
        "num_request_running": 7,
        "num_tokens_generated": 0,
        "actual_ttft_ms": 412.0,
        "actual_tpot_ms": 0.0,
        "prefix_cache_score": 0.875,
        "prefill_tokens_in_flight": 5120,
        "decode_tokens_in_flight": 0,
        "encoder_input_size": 0,
        "encoder_matched_size": 0,
        "timestamp": "2026-08-20T12:00:00.123456789Z",
    }
    base.update(overrides)
    return base
