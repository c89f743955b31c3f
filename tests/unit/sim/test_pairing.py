"""A request's TPOT sample matched to its TTFT sample (backend/sim/pairing.py)."""

from __future__ import annotations

from backend.sim.pairing import DECODE, PREFILL, Pairing, answer_length


def test_the_oldest_open_sample_of_the_pod_prompt_and_load_is_matched_first() -> None:
    p: Pairing[str] = Pairing()
    p.first_token(1.0, "a", 100, (4, 0), "older, other load")
    p.first_token(2.0, "a", 100, (7, 0), "same load")
    p.first_token(3.0, "a", 100, (7, 0), "same load, newer")
    p.first_token(1.5, "b", 100, (7, 0), "other pod")
    p.first_token(1.5, "a", 200, (7, 0), "other prompt")
    assert p.done(9.0, "a", 100, (7, 0)) == (2.0, "same load")
    assert p.done(9.0, "a", 100, (7, 0)) == (3.0, "same load, newer")
    # No open sample of its load left: the oldest of its pod and prompt.
    assert p.done(9.0, "a", 100, (7, 0)) == (1.0, "older, other load")
    assert p.done(9.0, "a", 100, (7, 0)) is None
    assert len(p) == 2


def test_a_first_token_after_the_answers_end_is_another_requests() -> None:
    p: Pairing[int] = Pairing()
    p.first_token(5.0, "a", 100, (), 1)
    assert p.done(4.0, "a", 100, ()) is None
    assert p.done(6.0, "a", 100, ()) == (5.0, 1)


def test_samples_left_open_too_long_or_beyond_the_bound_are_dropped() -> None:
    p: Pairing[int] = Pairing(open_for_s=60.0, max_open=3)
    p.first_token(0.0, "a", 1, (), 0)
    p.first_token(10.0, "a", 2, (), 1)
    p.first_token(70.0, "a", 3, (), 2)  # the first is now more than 60 s old
    assert len(p) == 2
    assert p.done(80.0, "a", 1, ()) is None
    p.first_token(71.0, "a", 4, (), 3)
    p.first_token(72.0, "a", 5, (), 4)  # four open: the oldest goes
    assert len(p) == 3
    assert p.done(80.0, "a", 2, ()) is None
    assert p.done(80.0, "a", 5, ()) == (72.0, 4)


def test_a_matched_sample_is_not_dropped_again() -> None:
    p: Pairing[int] = Pairing(open_for_s=10.0)
    p.first_token(0.0, "a", 1, (), 0)
    assert p.done(1.0, "a", 1, ()) == (0.0, 0)
    p.first_token(20.0, "a", 2, (), 1)  # prunes past the matched one without counting it
    assert len(p) == 1


def test_the_answers_length_is_its_decode_over_its_tpot_plus_the_first_token() -> None:
    assert answer_length(10.0, 20.0, 50.0) == 201
    assert answer_length(10.0, 10.0, 50.0) == 2  # a TPOT sample is only sent for 2 or more


def test_requests_whose_samples_hold_equal_values_are_matched_one_each() -> None:
    p: Pairing[None] = Pairing(open_for_s=10.0)
    p.first_token(0.0, "a", 1, (2, 0), None)
    p.first_token(0.0, "a", 1, (2, 0), None)
    assert p.done(1.0, "a", 1, (2, 0)) == (0.0, None)
    p.first_token(20.0, "a", 2, (), None)  # the other one ages out, the new one stays
    assert len(p) == 1
    assert p.done(21.0, "a", 1, (2, 0)) is None


def test_under_pd_a_decode_pods_answer_takes_a_prefill_pods_first_token() -> None:
    # Upstream's EPP posts a split request's TTFT sample from its prefill pod and its TPOT
    # sample from its decode pod: no pod in common, and each carries its own pod's load.
    p: Pairing[str] = Pairing()
    p.first_token(1.0, "prefill-0", 100, (3, 900), "split, older", PREFILL)
    p.first_token(2.0, "prefill-1", 100, (0, 0), "split, newer", PREFILL)
    p.first_token(2.5, "decode-0", 100, (5, 0), "served whole by decode-0", DECODE)
    p.first_token(3.0, "prefill-0", 200, (1, 0), "other prompt", PREFILL)
    # A request the decode pod served whole is its own pod's first.
    assert p.done(9.0, "decode-0", 100, (5, 0), DECODE) == (2.5, "served whole by decode-0")
    # Then the oldest prefill pod's first token of the prompt's length, whatever the loads.
    assert p.done(9.0, "decode-1", 100, (0, 0), DECODE) == (1.0, "split, older")
    assert p.done(9.5, "decode-0", 100, (9, 9), DECODE) == (2.0, "split, newer")
    assert p.done(9.5, "decode-0", 100, (9, 9), DECODE) is None
    assert len(p) == 1


def test_only_a_decode_pods_answer_looks_beyond_its_own_pod() -> None:
    p: Pairing[int] = Pairing()
    p.first_token(1.0, "prefill-0", 100, (), 1, PREFILL)
    assert p.done(5.0, "pod-3", 100, ()) is None  # no role: an aggregated pod's own samples
    assert p.done(5.0, "prefill-0", 100, ()) is None  # a prefill pod's own key holds none
    assert p.done(0.5, "decode-0", 100, (), DECODE) is None  # before the first token
    assert p.done(5.0, "decode-0", 100, (), DECODE) == (1.0, 1)
