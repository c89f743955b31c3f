"""The benchmark's outputs: JSON figures, the table and the plots, from the CLI as well."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backend.cli import app
from backend.sim.bench import BenchConfig, run_bench, slim, write_outputs


def test_run_bench_reports_every_policy_and_load(tmp_path: Path) -> None:
    config = BenchConfig(
        trace="azure-code",
        pods=3,
        loads=(1.0, 4.0),
        policies=("round-robin", "dynamo-kv"),
        limit=150,
    )
    data = run_bench(config)
    json.dumps(data, allow_nan=False)  # plain JSON, no NaN
    assert [(r["load"], r["policy"]) for r in data["results"]] == [
        (1.0, "round-robin"),
        (1.0, "dynamo-kv"),
        (4.0, "round-robin"),
        (4.0, "dynamo-kv"),
    ]
    row = data["results"][0]
    assert row["requests"] == 150 and row["completed"] + row["shed"] == 150
    for key in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(row[key]) == {"p50", "p90", "p99", "mean"}
    for r in data["results"]:
        # A share of the 150 requests, consistent with goodput (the throughput within both
        # SLOs) and at most the TTFT SLO's own attainment.
        met = r["slo_attainment"] * r["requests"]
        assert met == pytest.approx(round(met), abs=0.01)
        assert r["goodput_rps"] == pytest.approx(
            r["slo_attainment"] * r["throughput_rps"], rel=0.01
        )
        assert r["slo_attainment"] <= r["ttft_slo_attainment"]
    by_run = {(r["load"], r["policy"]): r["slo_attainment"] for r in data["results"]}
    for policy in config.policies:
        assert by_run[(4.0, policy)] < by_run[(1.0, policy)], "four times the load hurts"
    assert data["policies"]["dynamo-kv"].startswith("NVIDIA Dynamo")
    paths = write_outputs(data, tmp_path)
    names = {p.name for p in paths}
    assert {"results.json", "results.md", "cdf_ttft.png", "slo_vs_load.png"} <= names
    assert "| 4 | dynamo-kv |" in (tmp_path / "results.md").read_text(encoding="utf-8")
    assert "ttft_quantiles_ms" not in slim(data)["results"][0]


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policies"):
        BenchConfig(policies=("nope",))
    with pytest.raises(ValueError, match="unknown trace"):
        BenchConfig(trace="nope")


def test_cli_bench_writes_results(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "--trace",
            "azure-conv",
            "--pods",
            "2",
            "--loads",
            "2",
            "--policies",
            "least-request",
            "--limit",
            "60",
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results.json").is_file()
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert data["results"][0]["policy"] == "least-request"


def test_celery_task_returns_the_benchmark_json(tmp_path: Path) -> None:
    from backend.settings import Settings
    from backend.tasks import SIMULATE, create_celery

    # Nothing connects: the task runs in this process. The worker's tasks load as a worker's
    # start loads them (the app's `include`).
    app = create_celery(Settings(redis_url="redis://127.0.0.1:1/0"))
    app.loader.import_default_modules()
    data = app.tasks[SIMULATE](
        trace="azure-code",
        pods=2,
        loads=[2.0],
        policies=["round-robin"],
        limit=40,
        out_dir=str(tmp_path),
    )
    json.dumps(data, allow_nan=False)
    assert data["results"][0]["requests"] == 40
    assert (tmp_path / "results.md").is_file()
