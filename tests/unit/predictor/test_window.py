from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from backend.errors import describe_loc
from backend.predictor.window import WindowSpec
from backend.settings import WindowSettings

SPEC = WindowSpec(kv_step=0.1, prefix_step=0.25, queue_edges=(1, 3, 8, 16), cap=500)


def test_shape_of_the_default_window() -> None:
    assert (SPEC.n_kv, SPEC.n_prefix, SPEC.n_queue) == (10, 4, 5)
    assert SPEC.n_buckets == 200


@pytest.mark.parametrize(
    ("kv", "prefix", "waiting", "expected"),
    [
        (0.0, 0.0, 0, (0, 0, 0)),
        (0.3, 0.25, 1, (3, 1, 1)),  # values on an edge go up, despite 0.3 / 0.1 < 3
        (0.7, 0.5, 2, (7, 2, 1)),
        (1.0, 1.0, 3, (9, 3, 2)),  # the top edge belongs to the last bucket
        (0.99, 0.74, 16, (9, 2, 4)),
        (0.05, 0.9, 10_000, (0, 3, 4)),
    ],
)
def test_bucket_edges(
    kv: float, prefix: float, waiting: int, expected: tuple[int, int, int]
) -> None:
    assert SPEC.split(SPEC.bucket(kv, prefix, waiting)) == expected


@given(
    st.floats(0, 1, allow_nan=False), st.floats(0, 1, allow_nan=False), st.integers(0, 2**31 - 1)
)
def test_every_sample_lands_in_a_bucket_whose_ranges_contain_it(
    kv: float, prefix: float, waiting: int
) -> None:
    bucket = SPEC.bucket(kv, prefix, waiting)
    assert 0 <= bucket < SPEC.n_buckets
    (kv_lo, kv_hi), (p_lo, p_hi), (q_lo, q_hi) = SPEC.ranges(bucket)
    assert kv_lo - 1e-9 <= kv <= kv_hi + 1e-9
    assert p_lo - 1e-9 <= prefix <= p_hi + 1e-9
    assert q_lo <= waiting and (q_hi is None or waiting <= q_hi)


def test_queue_band_edges_must_increase() -> None:
    with pytest.raises(ValidationError):
        WindowSettings(queue_band_edges=[3, 1])
    with pytest.raises(ValidationError):
        WindowSettings(queue_band_edges=[0, 2])


def test_error_locations_name_row_and_field() -> None:
    assert describe_loc(("body", "entries", 3, "kv_cache_percentage")) == (
        3,
        "entries[3].kv_cache_percentage",
    )
    assert describe_loc(("query", "pool")) == (None, "pool")
    assert describe_loc(("body",)) == (None, "body")
