"""/v1/schedule hands the pods' progress fields to the models as the caller sent them."""

from __future__ import annotations

import numpy as np

from backend.prediction.schemas import columns
from backend.routing.schemas import CandidateIn
from backend.routing.service import candidate_columns, to_candidates


def _candidate(name: str, **fields: float) -> CandidateIn:
    return CandidateIn(
        name=name,
        kv_cache_percentage=0.3,
        input_token_length=900,
        num_request_waiting=1,
        num_request_running=4,
        prefix_cache_score=0.5,
        **fields,
    )


def test_schedule_predicts_each_candidate_with_the_progress_it_was_sent() -> None:
    items = [_candidate("a", ms_since_last_token=7.5, oldest_prefill_wait_ms=30.0), _candidate("b")]
    candidates = to_candidates(items)
    assert (candidates[0].ms_since_last_token, candidates[0].oldest_prefill_wait_ms) == (7.5, 30.0)
    cols = candidate_columns(columns(items), {"a": 0, "b": 1}, candidates)
    np.testing.assert_array_equal(cols["ms_since_last_token"], [7.5, 0.0])
    np.testing.assert_array_equal(cols["oldest_prefill_wait_ms"], [30.0, 0.0])
