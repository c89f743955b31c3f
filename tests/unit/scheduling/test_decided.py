"""The ledger of decisions the pods' counts do not show yet (backend/scheduling/decided.py)."""

from __future__ import annotations

import pytest

from backend.scheduling.decided import DecidedLedger
from backend.scheduling.types import Candidate

from . import helpers


def pod(name: str, running: int = 2, dispatched: int | None = None) -> Candidate:
    return helpers.pod(
        name,
        num_request_running=running,
        dispatched_requests=dispatched,
        prefill_tokens_in_flight=100,
    )


def test_a_decision_counts_on_its_pod_until_the_hold_ends() -> None:
    ledger = DecidedLedger(hold_s=0.010)
    ledger.record("a", "a", 700, now=1.000)
    assert ledger.pending("a", 1.000) == (1, 700)
    assert ledger.pending("a", 1.009) == (1, 700)
    assert ledger.pending("b", 1.005) == (0, 0)
    assert ledger.pending("a", 1.010) == (0, 0)  # held for exactly hold_s
    assert len(ledger) == 0


def test_decisions_add_up_and_leave_in_order() -> None:
    ledger = DecidedLedger(hold_s=0.010)
    ledger.record("a", "a", 700, now=1.000)
    ledger.record("a", "a", 300, now=1.004)
    ledger.record("b", "b", 50, now=1.006)
    assert ledger.pending("a", 1.006) == (2, 1000)
    assert ledger.pending("a", 1.012) == (1, 300)
    assert ledger.pending("b", 1.012) == (1, 50)
    assert ledger.pending("a", 1.020) == (0, 0)
    assert len(ledger) == 0


def test_a_separate_decode_pod_gets_the_request_but_not_the_prompt() -> None:
    ledger = DecidedLedger(hold_s=1.0)
    ledger.record("prefill-0", "decode-3", 1200, now=0.0)
    assert ledger.pending("prefill-0", 0.5) == (1, 1200)
    assert ledger.pending("decode-3", 0.5) == (1, 0)


def test_apply_adds_the_held_decisions_to_the_routers_counts() -> None:
    ledger = DecidedLedger(hold_s=1.0)
    ledger.record("a", "a", 700, now=0.0)
    ledger.record("a", "a", 300, now=0.1)
    ledger.record("b", "b", 50, now=0.2)
    a, b, c = pod("a", dispatched=5), pod("b", running=3), pod("c")
    seen = ledger.apply([a, b, c], now=0.5)
    assert seen[0].dispatched_requests == 7 and seen[0].prefill_tokens_in_flight == 1100
    # Without the router's own count, the scraped running gauge is the base (as the chain reads).
    assert seen[1].dispatched_requests == 4 and seen[1].prefill_tokens_in_flight == 150
    assert seen[2] is c  # nothing held: the same candidate
    assert seen[0].num_request_running == a.num_request_running  # the gauges stay as scraped
    assert [x.name for x in seen] == ["a", "b", "c"]


def test_hold_zero_holds_nothing() -> None:
    ledger = DecidedLedger(hold_s=0.0)
    ledger.record("a", "a", 700, now=1.0)
    assert ledger.pending("a", 1.0) == (0, 0)
    candidates = [pod("a")]
    assert ledger.apply(candidates, now=1.0)[0] is candidates[0]


def test_a_negative_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="hold_s"):
        DecidedLedger(hold_s=-1.0)
