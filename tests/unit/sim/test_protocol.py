"""The fair benchmark protocol: a tuning slice apart, disjoint evaluation slices, spreads."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from backend.sim.protocol import (
    SUITES,
    Job,
    ProtocolConfig,
    Runner,
    arrivals,
    bracket_capacity,
    compare,
    headline,
    job_key,
    run_job,
    run_protocol,
    table,
)
from backend.sim.routers import variants

SMALL = replace(SUITES["azure"], tuning_loads=(3.0,), slice_requests=60)
LINE = re.compile(r"slice (\d+) seed (\d+) load ([\d.]+) ([\w-]+)")


def test_options_are_tuned_on_the_tuning_slice_and_figures_come_from_the_others() -> None:
    lines: list[str] = []
    config = ProtocolConfig(
        SMALL,
        seeds=(4, 5, 6),
        loads=(1.0, 4.0),
        policies=("least-request", "lmetric", "dynamo-kv"),
        capacity_steps=1,
        workers=1,
    )
    partial: list[dict[str, object]] = []
    data = run_protocol(config, log=lines.append, checkpoint=partial.append)
    json.dumps(data, allow_nan=False)
    # The evaluation figures are handed out before the capacity bisection starts.
    (early,) = partial
    assert early["results"] == data["results"] and early["capacity"] == {}
    assert set(data["capacity"]) == set(config.policies or ())
    runs = [LINE.search(line).groups() for line in lines]  # type: ignore[union-attr]
    tuning = [r for r in runs if r[0] == "0"]
    # Only the policies with options were tuned, all on slice 0 at the tuning load.
    assert {r[3] for r in tuning} == {"lmetric", "dynamo-kv"}
    assert {float(r[2]) for r in tuning} == {3.0}
    # Every option combination once.
    assert len(tuning) == len(variants("lmetric")) + len(variants("dynamo-kv"))
    # Evaluation slice i always runs with seed i: spreads mix traffic and simulator noise.
    assert {(r[0], r[1]) for r in runs if r[0] != "0"} == {("1", "4"), ("2", "5"), ("3", "6")}
    assert data["tuning"]["dynamo-kv"]["options"] in [
        t["options"] for t in data["tuning"]["dynamo-kv"]["tried"]
    ]
    for row in data["results"]:
        assert len(row["runs"]) == 3
        s = row["slo_attainment"]
        assert s["min"] <= s["mean"] <= s["max"]
        assert s["mean"] == pytest.approx(
            sum(x["slo_attainment"] for x in row["runs"]) / 3, abs=1e-4
        )
    for c in data["capacity"].values():
        for lo, hi in c["brackets"]:
            assert hi is None or lo < hi
    # The capacity bracket reuses the evaluation runs instead of simulating them again.
    assert data["timing"]["reused_runs"] >= 3 * 2 * 3
    text = table(data)
    assert "| 4 | " in text and "SLO capacity" in text


def test_a_lead_counts_only_beyond_the_spread() -> None:
    a = {"mean": 0.80, "min": 0.78, "max": 0.82}
    assert compare(a, {"mean": 0.77, "min": 0.76, "max": 0.78}) == "within spread"
    assert compare(a, {"mean": 0.70, "min": 0.69, "max": 0.71}) == "wins"
    assert compare({"mean": 0.70, "min": 0.69, "max": 0.71}, a) == "loses"


def test_a_run_is_a_pure_function_of_its_job_in_any_process() -> None:
    job = Job(SMALL, 1, 60, 2.0, "least-request", (), 3, ())
    runner = Runner(workers=2, log=lambda line: None)
    try:
        (parallel,) = runner.run([job])
    finally:
        runner.close()
    serial = run_job(job)
    timing = ("wall_s", "cpu_s")
    assert {k: v for k, v in parallel.items() if k not in timing} == {
        k: v for k, v in serial.items() if k not in timing
    }


def test_a_cached_result_is_reused_by_a_later_runner_and_a_damaged_one_is_rerun(
    tmp_path: Path,
) -> None:
    job = Job(SMALL, 1, 60, 2.0, "least-request", (), 3, ())
    other = Job(SMALL, 1, 60, 3.0, "least-request", (), 3, ())
    ran: list[str] = []
    first = Runner(workers=1, log=ran.append, cache=tmp_path)
    (out,) = first.run([job])
    assert len(ran) == 1 and (tmp_path / f"{job_key(job)}.json").exists()

    ran.clear()
    second = Runner(workers=1, log=ran.append, cache=tmp_path)
    assert second.run([job]) == [out]
    assert ran == [] and second.loaded == {job}
    second.run([other])  # a different job is not answered from the cache
    assert len(ran) == 1

    (tmp_path / f"{job_key(job)}.json").write_text('{"slo_att', encoding="utf-8")
    ran.clear()
    third = Runner(workers=1, log=ran.append, cache=tmp_path)
    assert third.run([job])[0]["slo_attainment"] == out["slo_attainment"]
    assert len(ran) == 1 and third.loaded == set()


def test_bad_protocol_options_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown simulator option"):
        ProtocolConfig(SMALL, sim={"no_such_knob": 1.3})
    with pytest.raises(ValueError, match="unknown policies"):
        ProtocolConfig(SMALL, policies=("nope",))
    with pytest.raises(ValueError, match="too few"):
        run_protocol(ProtocolConfig(SMALL, slice_requests=5000, workers=1))


def test_the_headline_pairs_each_slice_against_the_same_slice() -> None:
    def row(policy: str, values: list[float]) -> dict[str, object]:
        runs = [{"slo_attainment": v} for v in values]
        mean = sum(values) / len(values)
        return {
            "load": 1.0,
            "policy": policy,
            "runs": runs,
            "slo_attainment": {"mean": mean, "min": min(values), "max": max(values)},
        }

    # Slices differ a lot; Headroom is 2 points ahead on each of them.
    rows = [row("headroom", [0.62, 0.72, 0.82]), row("lmetric", [0.60, 0.70, 0.80])]
    (h,) = headline(rows, {})
    (at,) = h["slo_attainment"]
    assert at["verdict"] == "within spread"
    assert at["paired_verdict"] == "ahead on every slice"
    assert at["paired_difference"]["mean"] == pytest.approx(0.02)
    assert h["capacity"] == "n/a"


def test_on_the_trace_basis_every_slice_arrives_at_the_same_mean_rate() -> None:
    rates = []
    for index in (1, 2, 3):
        part = arrivals(Job(SMALL, index, 200, 2.0, "least-request", (), 0, ()))
        rates.append(len(part) / part.duration_s)
    assert max(rates) == pytest.approx(min(rates), rel=1e-9)
    own = [arrivals(Job(SMALL, i, 200, 2.0, "least-request", (), 0, (), "slice")) for i in (1, 2)]
    assert len(own[0]) / own[0].duration_s != pytest.approx(len(own[1]) / own[1].duration_s)


def _row(policy: str, load: float, attainments: list[float]) -> dict[str, object]:
    return {
        "policy": policy,
        "load": load,
        "runs": [{"slo_attainment": a, "slo_tokens_s": 100.0 * load} for a in attainments],
    }


def test_a_checkpoint_reports_capacity_bracketed_by_the_evaluation_loads() -> None:
    # Replicate 0 keeps 90 % up to load 2; replicate 1 fails already at load 1; replicate 2
    # passes every load tried (censored). A dip after a failure does not count as capacity.
    rows = [
        _row("p", 1.0, [0.95, 0.80, 0.99]),
        _row("p", 2.0, [0.91, 0.95, 0.97]),
        _row("p", 3.0, [0.50, 0.40, 0.92]),
    ]
    cap = bracket_capacity(rows, 0.9)["p"]
    assert cap["brackets"] == [[2.0, 3.0], [0.0, 1.0], [3.0, None]]
    assert cap["load"] == {"mean": round(5.0 / 3, 4), "min": 0.0, "max": 3.0}
    assert cap["slo_tokens_s_at_capacity"]["max"] == 300.0
    assert cap["censored"] is True and cap["bisected"] is False
