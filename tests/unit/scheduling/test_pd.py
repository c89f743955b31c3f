"""Prefill/decode: upstream's greedy D-then-P against our joint pair selection."""

from __future__ import annotations

from typing import Any

import pytest

from backend.scheduling import (
    Candidate,
    SchedulingPolicy,
    SchedulingRequest,
    Topology,
    TransferModel,
    schedule,
)

from .helpers import fixed, pod


def placed(name: str, role: str, region: str, rack: str, **kw: Any) -> Candidate:
    topo = Topology(host=f"{name}-host", rack=rack, zone=f"{region}-1", region=region)
    return pod(name, role=role, topology=topo, **kw)


# Fast prefill in the east, fast decode in the west: each greedy choice is locally best, the pair
# is cross-region. The slightly slower pods share racks with their fast counterparts' partners.
PODS = [
    placed("p-east", "prefill", "east", "e1"),
    placed("p-west", "prefill", "west", "w1"),
    placed("d-east", "decode", "east", "e1"),
    placed("d-west", "decode", "west", "w1"),
]
TTFT = {"p-east": 100.0, "p-west": 130.0, "d-east": 900.0, "d-west": 900.0}
TPOT = {"p-east": 99.0, "p-west": 99.0, "d-east": 21.0, "d-west": 20.0}
PREDICT = fixed(TTFT, TPOT)
PROMPT = 8000
KV_BYTES = PROMPT * 131072


def transfer(gbps: float, latency: float) -> float:
    return latency + KV_BYTES / (gbps * 1e6)


def test_greedy_picks_the_slow_pair_and_joint_the_fast_one() -> None:
    """P/D: greedy = D on TPOT, then P on TTFT, apart: fast P + fast D, cross-region. Joint
    prices the KV transfer and takes the same-rack pair; the saving is in the decision."""
    request = SchedulingRequest(PROMPT, seed=0)
    greedy = schedule(request, PODS, SchedulingPolicy(), PREDICT)
    joint = schedule(request, PODS, SchedulingPolicy(pd_selection="joint"), PREDICT)

    assert (greedy.prefill, greedy.decode, greedy.chosen) == ("p-east", "d-west", "d-west")
    assert greedy.pd is not None and greedy.pd.distance == "cross_region"
    greedy_e2e = 100.0 + transfer(0.5, 40.0) + 256 * 20.0
    assert greedy.pd.e2e_ms == pytest.approx(greedy_e2e)

    assert (joint.prefill, joint.decode, joint.chosen) == ("p-west", "d-west", "d-west")
    assert joint.pd is not None and joint.pd.selection == "joint"
    assert joint.pd.distance == "same_rack"
    joint_e2e = 130.0 + transfer(25.0, 1.0) + 256 * 20.0
    assert joint.pd.e2e_ms == pytest.approx(joint_e2e)
    # Both pairs' predicted costs are in the output, so the difference is visible.
    assert (joint.pd.greedy_prefill, joint.pd.greedy_decode) == ("p-east", "d-west")
    assert joint.pd.greedy_e2e_ms == pytest.approx(greedy_e2e)
    assert joint.pd.saved_ms == pytest.approx(greedy_e2e - joint_e2e)
    assert joint.pd.saved_ms is not None and joint.pd.saved_ms > 2000
    assert "greedy pair p-east -> d-west" in joint.reason
    out = joint.to_dict()
    assert out["pd"]["saved_ms"] == pytest.approx(greedy_e2e - joint_e2e)
    transfers = {c["name"]: c["transfer_ms"] for c in out["candidates"]}
    assert transfers["p-west"] == pytest.approx(transfer(25.0, 1.0))
    assert transfers["p-east"] == pytest.approx(transfer(0.5, 40.0))


def test_greedy_decode_profile_ignores_ttft_and_prefill_profile_ignores_tpot() -> None:
    """P/D greedy (upstream): D is chosen on predicted TPOT alone, P on TTFT alone."""
    pred = fixed(
        {"p-east": 100.0, "p-west": 130.0, "d-east": 10.0, "d-west": 5000.0},
        {"p-east": 1.0, "p-west": 500.0, "d-east": 21.0, "d-west": 20.0},
    )
    d = schedule(SchedulingRequest(PROMPT, seed=0), PODS, SchedulingPolicy(picker="best_fit"), pred)
    assert (d.prefill, d.decode) == ("p-east", "d-west")
    by_name = {c.name: c for c in d.candidates}
    assert by_name["d-west"].profile == "decode" and by_name["d-west"].ttft_headroom_ms == 0.0
    assert by_name["p-west"].profile == "prefill" and by_name["p-west"].tpot_headroom_ms == 0.0


def test_greedy_prefill_profile_is_prefix_first() -> None:
    """P/D greedy (upstream): the prefill profile runs the affinity filters: exact hit first."""
    pods = [*PODS[:1], placed("p-west", "prefill", "west", "w1", prefix_cache_score=1.0), *PODS[2:]]
    d = schedule(
        SchedulingRequest(PROMPT, seed=0), pods, SchedulingPolicy(picker="best_fit"), PREDICT
    )
    assert d.prefill == "p-west"
    assert {c.name: c.removed_by for c in d.candidates}["p-east"] == "strict-affinity-filter"


def test_joint_respects_the_ttft_slo_including_transfer() -> None:
    """P/D joint: TTFT(P) + transfer must fit the TTFT SLO; a cheaper pair that misses it loses."""
    pods = [
        placed("p-near", "prefill", "west", "w1"),
        placed("p-far", "prefill", "east", "e1"),
        placed("d-west", "decode", "west", "w1"),
        placed("d-east", "decode", "east", "e1"),
    ]
    pred = fixed(
        {"p-near": 600.0, "p-far": 100.0, "d-west": 0.0, "d-east": 0.0},
        {"p-near": 0.0, "p-far": 0.0, "d-west": 20.0, "d-east": 30.0},
    )
    request = SchedulingRequest(PROMPT, ttft_slo_ms=700.0, seed=0)
    d = schedule(request, pods, SchedulingPolicy(pd_selection="joint"), pred)
    # Cheapest overall is p-far + d-east (100 + 43 + 7680 = 7823) vs p-near + d-west
    # (600 + 43 + 5120 = 5763): p-near + d-west is cheaper AND within 700 ms to first token.
    assert (d.prefill, d.decode) == ("p-near", "d-west")
    assert d.pd is not None and d.pd.meets_slo is True
    tight = SchedulingRequest(PROMPT, ttft_slo_ms=150.0, seed=0)
    d = schedule(tight, pods, SchedulingPolicy(pd_selection="joint"), pred)
    assert (d.prefill, d.decode) == ("p-far", "d-east"), "only pair within 150 ms to first token"


def test_joint_without_any_feasible_pair_takes_the_cheapest_and_says_so() -> None:
    request = SchedulingRequest(PROMPT, ttft_slo_ms=10.0, seed=0)
    d = schedule(request, PODS, SchedulingPolicy(pd_selection="joint"), PREDICT)
    assert (d.prefill, d.decode) == ("p-west", "d-west")
    assert d.pd is not None and d.pd.meets_slo is False
    assert "no pair is predicted to meet the SLO" in d.reason


def test_pd_fallback_without_predictions_keeps_greedy_heuristic_pair() -> None:
    """Fallback under P/D: both profiles use the composite heuristic; never a dropped request."""
    request = SchedulingRequest(PROMPT, ttft_slo_ms=500, tpot_slo_ms=50, priority=-1, seed=2)
    d = schedule(request, PODS, SchedulingPolicy(pd_selection="joint"), None)
    assert d.admitted and d.fallback
    assert d.prefill in {"p-east", "p-west"} and d.decode in {"d-east", "d-west"}
    assert d.pd is not None and d.pd.e2e_ms is None and d.pd.selection == "greedy"
    assert "joint selection needs predictions" in d.reason
    assert d.pd.transfer_ms is not None, "transfer is priced from topology alone"


def test_pd_admission_needs_a_valid_prefill_and_a_valid_decode_pod() -> None:
    """admitter under P/D: one valid role is not enough to serve a sheddable request."""
    request = SchedulingRequest(PROMPT, ttft_slo_ms=500, tpot_slo_ms=10, priority=-1, seed=0)
    d = schedule(
        request, PODS, SchedulingPolicy(), PREDICT
    )  # prefill fine, every decode pod > 10 ms TPOT
    assert not d.admitted and d.chosen is None
    ok = SchedulingRequest(PROMPT, ttft_slo_ms=500, tpot_slo_ms=20.5, priority=-1, seed=0)
    assert schedule(ok, PODS, SchedulingPolicy(), PREDICT).admitted


def test_unlabelled_pods_decode_and_pd_needs_prefill_pods() -> None:
    """P/D: upstream's decode-filter accepts unlabelled pods; no prefill pods -> no P/D."""
    pods = [placed("p", "prefill", "west", "w1"), placed("x", "", "west", "w1")]
    d = schedule(
        SchedulingRequest(PROMPT, seed=0), pods, SchedulingPolicy(), fixed({"p": 1.0, "x": 1.0})
    )
    assert (d.prefill, d.decode) == ("p", "x")
    d = schedule(SchedulingRequest(PROMPT, seed=0), PODS[2:], SchedulingPolicy(), PREDICT)
    assert d.pd is None and d.prefill is None and d.chosen in {"d-east", "d-west"}


def test_learned_transfer_model_changes_the_joint_choice() -> None:
    """KV transfer model: observed transfers replace the configured bandwidths."""
    model = TransferModel(min_samples=4, forgetting=1.0)
    for size in (1e8, 2e8, 4e8, 8e8):
        model.observe(size, "cross_region", 1.0 + size / 200e6)  # a fat 200 GB/s link, say
    request = SchedulingRequest(PROMPT, seed=0)
    d = schedule(
        request, PODS, SchedulingPolicy(pd_selection="joint"), PREDICT, transfer_model=model
    )
    assert (d.prefill, d.decode) == ("p-east", "d-west")
    assert d.pd is not None and d.pd.saved_ms == pytest.approx(0.0)


def test_without_traces_a_pd_decision_carries_its_pair_alone() -> None:
    request = SchedulingRequest(PROMPT, seed=0)
    full = schedule(request, PODS, SchedulingPolicy(), PREDICT)
    short = schedule(request, PODS, SchedulingPolicy(), PREDICT, traces=False)
    assert (short.prefill, short.decode, short.pd) == (full.prefill, full.decode, full.pd)
    pair = {"p-east", "d-west"}
    assert short.candidates == tuple(c for c in full.candidates if c.name in pair)
