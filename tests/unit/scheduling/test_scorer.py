"""latency-scorer (upstream scorer/latency/plugin.go): buckets, normalisation, exact formulas."""

from __future__ import annotations

import numpy as np
import pytest

from backend.scheduling.scorer import LatencyScorer, _go_round, composite_scores, score_bucket
from backend.scheduling.types import Candidate, SchedulingPolicy, SchedulingRequest

from .helpers import pod, scores_by_name, state_for

SLO = SchedulingRequest(1000, ttft_slo_ms=500, tpot_slo_ms=50)


def scored(
    pods: list[Candidate],
    ttft: list[float] | None,
    tpot: list[float] | None = None,
    request: SchedulingRequest = SLO,
    policy: SchedulingPolicy | None = None,
) -> tuple[dict[str, float], str]:
    policy = policy or SchedulingPolicy()
    state = state_for(pods, ttft, tpot, request=request, policy=policy)
    bucket = LatencyScorer(policy)(state)
    return scores_by_name(state), bucket


@pytest.mark.parametrize(
    ("least", "expected"),
    [
        pytest.param(
            True, [0.01, 0.51, 1.01], id="scorer: least = (trunc((1-c)*100)+1)/100, up to 1.01"
        ),
        pytest.param(False, [1.01, 0.51, 0.01], id="scorer: most = (trunc(c*100)+1)/100"),
    ],
)
def test_score_formula_least_and_most(least: bool, expected: list[float]) -> None:
    # TTFT |headroom| 250/150/50 normalises to 1/0.5/0; TPOT has zero range so TTFT gets weight 1.
    out = score_bucket(np.array([250.0, 150.0, 50.0]), np.array([10.0] * 3), 0.8, 0.2, least)
    assert out.tolist() == pytest.approx(expected)


def test_score_zero_range_dimension_gets_weight_zero() -> None:
    """scorer: TTFT range 0 -> alpha 0, beta 1 (TPOT alone orders the pods)."""
    out = score_bucket(np.array([100.0] * 3), np.array([30.0, 20.0, 10.0]), 0.8, 0.2, True)
    assert out.tolist() == pytest.approx([0.01, 0.51, 1.01])


def test_score_both_ranges_zero_gives_half() -> None:
    """scorer: no range anywhere -> normalised 0.5 each, least score (trunc(50)+1)/100."""
    out = score_bucket(np.array([100.0] * 2), np.array([10.0] * 2), 0.8, 0.2, True)
    assert out.tolist() == pytest.approx([0.51, 0.51])


def test_score_blends_normalised_dimensions_with_weights() -> None:
    """scorer: combined = 0.8 * nTTFT + 0.2 * nTPOT over min-max normalised |headroom|."""
    out = score_bucket(np.array([0.0, 100.0]), np.array([10.0, 0.0]), 0.8, 0.2, True)
    # pod0: n = (0, 1) -> c = 0.2 -> trunc(80)+1 = 81. pod1: n = (1, 0) -> c = 0.8, and
    # (1 - 0.8) * 100 = 19.999999999999996 in IEEE doubles, so trunc gives 19 -> 20, as in Go.
    assert out.tolist() == pytest.approx([0.81, 0.20])


def test_score_uses_absolute_headroom() -> None:
    """scorer: normalisation is on |headroom|, so a deficit of 50 ranks like a slack of 50."""
    out = score_bucket(np.array([-50.0, -150.0]), np.array([0.0, 0.0]), 0.8, 0.2, True)
    assert out.tolist() == pytest.approx([1.01, 0.01])


def test_scorer_scores_only_positive_pods_when_any() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    scores, bucket = scored(pods, [100, 400, 900])
    assert bucket == "positive"
    assert scores == pytest.approx({"a": 0.01, "b": 1.01, "c": 0.0})


def test_scorer_all_negative_prefers_idle_pods() -> None:
    """scorer: all negative -> pods with zero dispatched requests are the only ones scored."""
    pods = [pod("a"), pod("b", dispatched_requests=0), pod("c", num_request_running=0)]
    scores, bucket = scored(pods, [600, 900, 800])
    assert bucket == "idle"
    assert scores["a"] == 0.0 and scores["b"] > 0 and scores["c"] > 0
    assert scores["c"] > scores["b"], "forced least: the smaller deficit wins"


def test_scorer_idle_uses_dispatched_count_over_scraped_running() -> None:
    pods = [pod("a", num_request_running=0, dispatched_requests=3), pod("b")]
    _, bucket = scored(pods, [600, 900])
    assert bucket == "ttft_only_negative"


@pytest.mark.parametrize(
    ("ttft", "tpot", "bucket", "winner"),
    [
        pytest.param(
            [600, 100, 600],
            [60, 60, 10],
            "tpot_only_negative",
            "b",
            id="scorer: TPOT-only-negative bucket first",
        ),
        pytest.param(
            [600, 700, 600],
            [10, 60, 60],
            "ttft_only_negative",
            "a",
            id="scorer: then TTFT-only-negative",
        ),
        pytest.param(
            [600, 700, 800], [60, 70, 80], "both_negative", "a", id="scorer: then both-negative"
        ),
    ],
)
def test_scorer_deficit_buckets(
    ttft: list[float], tpot: list[float], bucket: str, winner: str
) -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    scores, got = scored(pods, ttft, tpot)
    assert got == bucket
    assert max(scores, key=scores.__getitem__) == winner


def test_scorer_deficit_bucket_excludes_other_buckets() -> None:
    pods = [pod("a"), pod("b"), pod("c")]
    scores, bucket = scored(pods, [600, 100, 600], [60, 60, 10])
    assert bucket == "tpot_only_negative"
    assert scores == pytest.approx({"a": 0.0, "b": 0.51, "c": 0.0})


def test_scorer_forces_least_for_negative_headroom() -> None:
    """scorer: with strategy most and all pods negative, the smallest deficit still wins."""
    pods = [pod("a"), pod("b")]
    scores, _ = scored(pods, [600, 900], policy=SchedulingPolicy(strategy="most"))
    assert scores == pytest.approx({"a": 1.01, "b": 0.01})


def test_scorer_without_slo_prefers_lowest_predicted_latency() -> None:
    """scorer: no SLO headers -> headroom = -predicted -> lowest predicted TTFT scores highest."""
    pods = [pod("a"), pod("b"), pod("c")]
    scores, bucket = scored(pods, [300, 100, 200], request=SchedulingRequest(1000, stream=False))
    assert bucket == "both_negative" or bucket == "ttft_only_negative"
    assert scores == pytest.approx({"a": 0.01, "b": 1.01, "c": 0.51})


def test_scorer_unpredicted_pods_rank_after_predicted_ones() -> None:
    """Deviation from upstream: a pod without prediction never outranks a predicted one."""
    pods = [pod("a"), pod("b")]
    scores, bucket = scored(pods, [900, float("nan")], [60, 10])
    assert bucket == "both_negative"
    assert scores["b"] == 0.0


def test_composite_fallback_exact_values() -> None:
    """scorer: composite = normalised weights on (1-KV), (maxQ-q)/maxQ, prefix; Go-rounded."""
    pods = [
        pod("a", kv_cache_percentage=0.2, num_request_waiting=0, prefix_cache_score=1.0),
        pod("b", kv_cache_percentage=0.6, num_request_waiting=4, prefix_cache_score=0.0),
    ]
    scores, bucket = scored(pods, None)
    assert bucket == "composite"
    assert scores == pytest.approx({"a": 0.93, "b": 0.13})


def test_composite_fallback_no_queue_anywhere_counts_as_full_relative_queue() -> None:
    out = composite_scores(np.array([0.5]), np.array([0.0]), np.array([0.0]), SchedulingPolicy())
    assert out.tolist() == pytest.approx([0.5])  # (0.5 + 1 + 0) / 3


def test_composite_fallback_uses_policy_weights_and_zero_weights_mean_kv_only() -> None:
    kv, q, pre = np.array([0.25]), np.array([2.0]), np.array([1.0])
    only_prefix = SchedulingPolicy(
        fallback_kv_weight=0, fallback_queue_weight=0, fallback_prefix_weight=1
    )
    assert composite_scores(kv, q, pre, only_prefix).tolist() == [1.0]
    none = SchedulingPolicy(fallback_kv_weight=0, fallback_queue_weight=0, fallback_prefix_weight=0)
    assert composite_scores(kv, q, pre, none).tolist() == [0.75]


def test_go_round_is_half_away_from_zero() -> None:
    assert _go_round(np.array([0.5, 1.5, 2.5, -0.5, 2.4999])).tolist() == [1, 2, 3, -1, 2]


def test_default_tpot_weight_is_exactly_upstreams() -> None:
    assert SchedulingPolicy().tpot_weight == 0.2
