"""The advisor's search on a small workload: budgeted, ranked on held-out parts, each candidate
labelled with how it runs and exporting the EPP config Apply would give."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from backend.advisor.search import Budget, Workload, advise, candidates
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
    schedule = [c for c in found if c.kind == "schedule"]
    assert schedule and all(dict(c.spec or {})["picker"] == "best_fit" for c in schedule)
    # EPP-expressible predicted candidates use only what the EPP has: the lottery, greedy P/D.
    for c in found:
        if c.kind == "epp" and c.spec is not None:
            assert c.spec["picker"] == "weighted_random" and c.spec["pd_selection"] == "greedy"
    assert all(c.spec != active.model_dump(mode="json") for c in found)


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
            assert r["needs"] == "/v1/schedule" and r["epp_config"] is None
        elif r["appliable"]:
            config = yaml.safe_load(r["epp_config"])
            scorer = next(p for p in config["plugins"] if p["type"] == "latency-scorer")
            assert scorer["parameters"]["headroomSelectionStrategy"] == r["spec"]["strategy"]
            assert scorer["parameters"]["ttftWeight"] == r["spec"]["ttft_weight"]
        elif r["kind"] == "epp":
            assert not r["appliable"] and r["reproduces"]


def test_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError):
        Budget(requests=5)
    with pytest.raises(ValueError):
        Budget(seeds=0)
