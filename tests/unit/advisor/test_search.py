"""The advisor's search on a small workload: budgeted, ranked on held-out parts, each candidate
labelled with how it runs and exporting the EPP config Apply would give."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from backend.advisor.search import (
    Budget,
    Workload,
    advise,
    candidates,
    protocol_policy,
    run_as,
)
from backend.advisor.workloads import shipped_trace
from backend.policies.schemas import PolicySpec

BUDGET = Budget(requests=30, seeds=2, survivors=2, finalists=1)


@pytest.fixture(scope="module")
def workload() -> Workload:
    return shipped_trace("azure-code", BUDGET, PolicySpec())


@pytest.fixture(scope="module")
def result(workload: Workload) -> dict[str, Any]:
    return advise(workload, PolicySpec(), BUDGET)


def test_parts_are_disjoint_and_one_per_seed_plus_tuning(workload: Workload) -> None:
    assert workload.held_out == BUDGET.seeds and len(workload.parts) == BUDGET.seeds + 1
    assert all(len(p) == BUDGET.requests for p in workload.parts)
    assert workload.source == "shipped-trace" and "not this pool's own traffic" in workload.label


def test_candidates_cover_the_epp_space_and_never_repeat_the_active_policy() -> None:
    active = PolicySpec()
    found = candidates(active)
    labels = " | ".join(c.label for c in found)
    for part in ("least", "most", "TTFT/TPOT 0.5/0.5", "looser affinity", "tier epsilon"):
        assert part in labels
    assert any(c.policy == "llm-d-default" for c in found)
    assert {"llm-d-322", "llm-d-111"} <= {c.policy for c in found}
    # Headroom-only: the best-fit picker on the predicted chain, and LMetric (its own chain).
    schedule = [c for c in found if c.kind == "schedule"]
    assert {c.spec["chain"] for c in schedule if c.spec} == {"predicted-latency", "lmetric"}
    for c in schedule:
        assert c.spec is not None
        assert c.spec["chain"] == "lmetric" or c.spec["picker"] == "best_fit"
    # Headroom's own scheduling carries its joint P/D pair choice (what wins on the P/D layout).
    best_fit = [c.spec for c in schedule if c.spec and c.spec["chain"] == "predicted-latency"]
    assert {s["strategy"] for s in best_fit} == {"most", "least"}
    assert all(s["pd_selection"] == "joint" for s in best_fit)
    assert {c.options for c in schedule if c.policy == "lmetric"} == {
        (),
        (("batch", "scraped"),),
        (("pending", False),),
        (("pending", False), ("batch", "scraped")),
    }
    # Every candidate is a policy Apply can save, naming its chain; EPP-expressible predicted
    # candidates use only what the EPP has: the lottery, greedy P/D.
    for c in found:
        assert c.spec is not None
        spec = PolicySpec.model_validate(c.spec)
        policy, options = protocol_policy(spec)
        # The predicted chain runs as Headroom's policy; where an unchanged EPP runs it (it
        # calls /predict, not /v1/schedule) no decision is held before dispatch.
        unheld = policy == "headroom" and c.kind != "schedule"
        expected = (*options, ("decided_hold_ms", 0.0)) if unheld else options
        assert (c.policy, c.options) == (policy, expected)
        if c.kind == "epp":
            assert spec.chain in ("predicted-latency", "llm-d-default", "load-prefix")
        if c.kind == "epp" and spec.chain == "predicted-latency":
            assert spec.picker == "weighted_random" and spec.pd_selection == "greedy"
    sticky = [PolicySpec.model_validate(c.spec) for c in found if c.policy == "llm-d-default"]
    assert {(s.sticky_affinity_threshold, s.max_tokens_in_flight_penalty) for s in sticky} == {
        (a, p) for a in (0.8, 0.5) for p in (286_720, 65_536, 16_384)
    }
    assert all(c.spec != active.model_dump(mode="json") for c in found)


def test_a_policy_on_a_load_chain_runs_as_that_chain_and_is_not_screened_twice() -> None:
    active = PolicySpec(chain="llm-d-default", sticky_affinity_threshold=0.5)
    assert protocol_policy(active) == ("llm-d-default", (("affinity_threshold", 0.5),))
    found = candidates(active)
    assert all(c.spec != active.model_dump(mode="json") for c in found)
    weights = PolicySpec(chain="load-prefix", load_prefix_queue_weight=1.0)
    assert protocol_policy(weights) == (
        "llm-d-322",
        (("queue", 1.0), ("kv", 2.0), ("prefix", 3.0)),
    )
    assert protocol_policy(PolicySpec(chain="load-prefix", **_ones())) == ("llm-d-111", ())


def _ones() -> dict[str, float]:
    return {f"load_prefix_{k}_weight": 1.0 for k in ("queue", "kv", "prefix")}


def test_ranking_is_by_held_out_mean_with_the_active_policy_and_shipped_chain(
    result: dict[str, Any],
) -> None:
    ranking = result["ranking"]
    means = [r["held_out"]["slo_attainment"]["mean"] for r in ranking]
    assert means == sorted(means, reverse=True)
    kinds = [r["kind"] for r in ranking]
    assert kinds.count("active") == 1 and kinds.count("reference") == 1
    for r in ranking:
        runs = r["held_out"]["slo_attainment_runs"]
        assert len(runs) == BUDGET.seeds
        s = r["held_out"]["slo_attainment"]
        assert s["min"] == min(runs) and s["max"] == max(runs)
    assert ranking[result["pick"]]["kind"] == "epp"
    assert ranking[result["pick_appliable"]]["appliable"]
    # Budgeted: screening each candidate once, then a few more runs, not a grid over seeds.
    screened = len(result["screened"])
    assert screened < result["simulations"] <= screened + (BUDGET.survivors + 1) + 5 * 2


def test_each_row_says_how_it_runs_and_exports_its_own_epp_config(
    result: dict[str, Any],
) -> None:
    for r in result["ranking"]:
        if r["kind"] == "schedule":
            assert r["needs"] == "/v1/schedule" and r["epp_config"] is None and r["appliable"]
        elif r["kind"] == "reference":
            assert not r["appliable"] and r["reproduces"] and r["epp_config"] is None
        else:
            # The active policy is what the pool runs already: nothing to apply.
            assert r["appliable"] == (r["kind"] == "epp")
            config = yaml.safe_load(r["epp_config"])
            types = [p["type"] for p in config["plugins"]]
            if r["spec"]["chain"] == "llm-d-default":
                assert "token-load-scorer" in types
                gate = next(p for p in config["plugins"] if p["type"].endswith("affinity-filter"))
                threshold = gate["parameters"]["affinityThreshold"]
                assert threshold == r["spec"]["sticky_affinity_threshold"]
            elif r["spec"]["chain"] == "load-prefix":
                assert "queue-scorer" in types and "latency-scorer" not in types
            else:
                scorer = next(p for p in config["plugins"] if p["type"] == "latency-scorer")
                assert scorer["parameters"]["headroomSelectionStrategy"] == r["spec"]["strategy"]
                assert scorer["parameters"]["ttftWeight"] == r["spec"]["ttft_weight"]


def test_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Budget(requests=5)
    with pytest.raises(ValueError):
        Budget(seeds=0)


@pytest.mark.parametrize(
    ("name", "roles", "profiles"),
    [
        ("azure-code-mixed", {""}, {"a100-llama2-7b", "h100-llama2-7b"}),
        ("mooncake-pd", {"prefill", "decode"}, {"a100-llama3-8b"}),
    ],
)
def test_the_mixed_pool_and_pd_suites_are_shipped_workloads_every_candidate_runs_on(
    name: str, roles: set[str], profiles: set[str]
) -> None:
    """The protocol's other two suites as advisor workloads: their own pools (two GPU classes;
    prefill and decode pods), and every screened candidate, each chain, routes on them."""
    budget = Budget(requests=12, seeds=1, survivors=1, finalists=1)
    workload = shipped_trace(name, budget, PolicySpec())
    assert len(workload.pool) == 8
    assert {p.role for p in workload.pool} == roles
    assert {p.profile for p in workload.pool} == profiles
    result = advise(workload, PolicySpec(), budget)
    assert len(result["screened"]) == len(candidates(PolicySpec()))
    assert all(0.0 <= row["tuning_slo_attainment"] <= 1.0 for row in result["screened"])
    assert result["workload"]["gpu"] == sorted(profiles)


def test_the_active_policy_runs_as_the_pool_runs_it() -> None:
    # On upstream's options an unchanged EPP runs it (it calls /predict: no decision is held);
    # with an option only /v1/schedule applies, /v1/schedule runs it and holds its decisions.
    epp = PolicySpec()
    assert run_as("active", epp) == (
        "headroom",
        (*protocol_policy(epp)[1], ("decided_hold_ms", 0.0)),
    )
    schedule = PolicySpec(picker="best_fit")
    assert run_as("active", schedule) == protocol_policy(schedule)
    assert run_as("schedule", epp) == protocol_policy(epp)
    load_chain = PolicySpec(chain="llm-d-default")
    assert run_as("active", load_chain) == protocol_policy(load_chain)
