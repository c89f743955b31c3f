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
    sent = {
        "ms_since_last_token": 7.5,
        "oldest_prefill_wait_ms": 30.0,
        "ms_since_last_first_token": 9.0,
    }
    items = [_candidate("a", **sent), _candidate("b")]
    candidates = to_candidates(items)
    assert {f: getattr(candidates[0], f) for f in sent} == sent
    cols = candidate_columns(columns(items), {"a": 0, "b": 1}, candidates)
    for field, value in sent.items():
        np.testing.assert_array_equal(cols[field], [value, 0.0])
