"""The what-if reports each run's live prediction error beside what was knowable at dispatch."""

from __future__ import annotations

from backend.policies.schemas import PolicySpec
from backend.whatif.jobs import WhatIfJob
from backend.whatif.simulation import compare_policies


def test_each_run_shows_its_live_error_beside_the_floor() -> None:
    active = PolicySpec().model_dump(mode="json")
    edited = PolicySpec(strategy="least").model_dump(mode="json")
    job = WhatIfJob("j", "default", "mooncake-conversation", "eddie", edited, active, None, 600)
    rows = {r["metric"]: r for r in compare_policies(job, lambda fraction, message: None)["rows"]}
    for target in ("TTFT", "TPOT"):
        live = rows[f"Live {target} error (MAPE, %)"]
        floor = rows[f"{target} error knowable at dispatch (floor MAPE, %)"]
        for run in ("baseline", "candidate"):
            assert live[run] is not None and floor[run] is not None and floor[run] > 0.0
        # What was knowable moves with the policy's placements; it is not a goal to judge by.
        assert floor["verdict"] == ""
    # The router's TTFT predictions err well above what a copy of the pod knew at dispatch.
    ttft_live = rows["Live TTFT error (MAPE, %)"]
    ttft_floor = rows["TTFT error knowable at dispatch (floor MAPE, %)"]
    assert all(ttft_live[run] > 2 * ttft_floor[run] for run in ("baseline", "candidate"))
