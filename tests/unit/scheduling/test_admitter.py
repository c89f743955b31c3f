"""latency-slo-admitter (upstream latencyslo plugin): shed sheddable requests only when no pod
is valid, idle or cold, and only on predictions."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from backend.scheduling import Candidate, SchedulingPolicy, SchedulingRequest, schedule
from backend.scheduling.admitter import REJECT_REASON

from .helpers import fixed, pod

SLOW = fixed({"a": 900.0, "b": 800.0})  # both miss a 500 ms TTFT SLO
FAST = fixed({"a": 900.0, "b": 100.0})  # b meets it
BUSY = [pod("a"), pod("b")]


def decide(
    candidates: Sequence[Candidate],
    predictor: object,
    *,
    priority: int = -1,
    ttft_slo: float | None = 500.0,
    tpot_slo: float | None = 50.0,
    mode: str = "slo",
) -> tuple[bool, str]:
    d = schedule(
        SchedulingRequest(1000, ttft_slo, tpot_slo, priority=priority, seed=1),
        candidates,
        SchedulingPolicy(mode=mode),  # type: ignore[arg-type]
        predictor,  # type: ignore[arg-type]
    )
    return d.admitted, d.reason


@pytest.mark.parametrize(
    ("candidates", "predictor", "kwargs", "admitted"),
    [
        pytest.param(
            BUSY, SLOW, {}, False, id="admitter: sheddable rejected: no valid, idle or cold pod"
        ),
        pytest.param(
            BUSY, SLOW, {"priority": 0}, True, id="admitter: priority >= 0 always admitted"
        ),
        pytest.param(
            BUSY, SLOW, {"priority": 5}, True, id="admitter: positive priority always admitted"
        ),
        pytest.param(
            BUSY, FAST, {}, True, id="admitter: sheddable admitted when some pod is valid"
        ),
        pytest.param(
            [pod("a"), pod("b", num_request_running=0)],
            SLOW,
            {},
            True,
            id="admitter: sheddable admitted when a pod is idle (scraped running == 0)",
        ),
        pytest.param(
            [pod("a"), pod("b", num_request_running=3, dispatched_requests=0)],
            SLOW,
            {},
            False,
            id="admitter: idle means scraped running, not the router's dispatched count",
        ),
        pytest.param(
            [pod("a"), pod("b", kv_cache_percentage=0.019)],
            SLOW,
            {},
            True,
            id="admitter: sheddable admitted when a pod is cold (KV < 0.02)",
        ),
        pytest.param(
            [pod("a"), pod("b", kv_cache_percentage=0.02)],
            SLOW,
            {},
            False,
            id="admitter: KV == 0.02 is not cold",
        ),
        pytest.param(
            BUSY,
            SLOW,
            {"ttft_slo": None, "tpot_slo": None},
            True,
            id="admitter: sheddable without any SLO header admitted",
        ),
        pytest.param(BUSY, None, {}, True, id="admitter: no predictions -> fail open"),
        pytest.param(
            BUSY,
            fixed({}),
            {},
            True,
            id="admitter: predictor with no finite prediction -> fail open",
        ),
        pytest.param(
            BUSY,
            fixed({"a": 100.0, "b": 100.0}),
            {"ttft_slo": None},
            False,
            id="admitter: TPOT-only SLO still judges TTFT against 0 (upstream), so nothing valid",
        ),
        pytest.param(
            BUSY, SLOW, {"mode": "routing"}, True, id="admitter: not in the routing-only chain"
        ),
    ],
)
def test_admitter_rules(
    candidates: Sequence[Candidate], predictor: object, kwargs: dict[str, object], admitted: bool
) -> None:
    assert decide(candidates, predictor, **kwargs)[0] is admitted  # type: ignore[arg-type]


def test_admitter_rejection_reason_is_upstreams_text() -> None:
    admitted, reason = decide(BUSY, SLOW)
    assert not admitted
    assert reason == "request cannot be admitted: no valid endpoint available to serve the request"
    assert reason == REJECT_REASON


def test_admitter_rejection_chooses_nothing_but_still_traces() -> None:
    d = schedule(SchedulingRequest(1000, 500, 50, priority=-1), BUSY, SchedulingPolicy(), SLOW)
    assert (d.admitted, d.chosen) == (False, None)
    assert [c.ttft_ms for c in d.candidates] == [900.0, 800.0]
    assert all(c.valid is False for c in d.candidates)


def test_admitter_tpot_violation_alone_makes_a_pod_invalid() -> None:
    """admitter: valid = TTFT valid AND TPOT valid (upstream IsValid)."""
    predictor = fixed({"a": 100.0, "b": 100.0}, {"a": 60.0, "b": 70.0})
    assert decide(BUSY, predictor) == (False, REJECT_REASON)
    assert decide(BUSY, predictor, tpot_slo=65.0)[0] is True


def test_admitter_sees_every_pod_not_just_the_filtered_ones() -> None:
    """admitter: runs in request control, before any filter narrows the set."""
    pods = [pod("a", prefix_cache_score=1.0), pod("b")]
    assert decide(pods, fixed({"a": 900.0, "b": 100.0}))[0] is True
