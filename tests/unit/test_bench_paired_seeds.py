"""The paired per-seed comparison that decides a live-accuracy candidate's harm guards."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.paired_seeds import beyond, compare, interval, nulls_envelope, per_seed


def _seed(seed: int, mape: float, slo: float, early_slo: float, bias: float) -> dict[str, Any]:
    return {
        "seed": seed,
        "ttft_live_mape_pct": mape,
        "slo_attainment": slo,
        "early": {"slo_attainment": early_slo, "ttft_median_bias_pct": bias},
    }


def test_the_interval_brackets_the_mean_and_is_the_same_every_time() -> None:
    diffs = np.array([-3.0, -2.0, -1.0, 0.0, 1.0])
    a, b = interval(diffs), interval(diffs)
    assert a == b  # a fixed generator: a rule's verdict cannot change between two readings
    assert a["mean"] == pytest.approx(-1.0)
    assert a["lo"] < a["mean"] < a["hi"]
    assert a["lo"] >= -3.0 and a["hi"] <= 1.0
    # No spread, no interval: every resample is the mean.
    assert interval(np.full(5, 2.0)) == {"mean": 2.0, "lo": 2.0, "hi": 2.0}


def test_compare_pairs_by_seed_and_reports_the_worst_seed() -> None:
    before = {s: _seed(s, 10.0, 0.70, 0.60, 0.0) for s in (1, 2, 3)}
    after = {
        1: _seed(1, 8.0, 0.71, 0.62, 1.0),
        2: _seed(2, 9.0, 0.67, 0.55, -4.0),  # the worst seed: 3 points down, 5 early, 4 bias
        3: _seed(3, 7.0, 0.70, 0.60, 0.0),
        4: _seed(4, 1.0, 0.10, 0.10, -50.0),  # no "before" for it: not paired, not counted
    }
    out = compare(before, after)
    assert out["seeds"] == 3
    assert out["ttft_mape_diff"]["mean"] == pytest.approx(-2.0)
    assert out["ttft_mape_lower_on"] == 3
    assert out["slo_diff"]["mean"] == pytest.approx(100 * (0.01 - 0.03) / 3, abs=1e-3)
    assert (out["worst_slo_drop"], out["worst_slo_seed"]) == (pytest.approx(3.0), 2)
    assert (out["worst_early_drop"], out["worst_early_seed"]) == (pytest.approx(5.0), 2)
    assert (out["worst_bias_to_optimism"], out["worst_bias_seed"]) == (pytest.approx(4.0), 2)


def test_per_seed_reads_headroom_rows_of_a_live_accuracy_file(tmp_path: Path) -> None:
    data = {
        "results": [
            {"suite": "azure", "policy": "headroom", "per_seed": [_seed(7, 1, 1, 1, 0)]},
            {
                "suite": "azure",
                "policy": "llm-d-predicted-best",
                "per_seed": [_seed(7, 9, 0, 0, 0)],
            },
        ]
    }
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert per_seed(str(path)) == {"azure": {7: _seed(7, 1, 1, 1, 0)}}


def _diffs(mape: tuple[float, float], slo: tuple[float, float]) -> dict[str, Any]:
    return {
        "ttft_mape_diff": {"mean": sum(mape) / 2, "lo": mape[0], "hi": mape[1]},
        "slo_diff": {"mean": sum(slo) / 2, "lo": slo[0], "hi": slo[1]},
        "early_slo_diff": {"mean": 0.0, "lo": -0.1, "hi": 0.1},
    }


def test_a_move_counts_only_outside_every_neutral_changes_reach() -> None:
    nulls = [_diffs((-0.5, 0.2), (-0.67, 0.13)), _diffs((-0.4, 0.6), (-0.21, 0.58))]
    envelope = nulls_envelope(nulls)
    assert envelope["slo_diff"] == {"lo": -0.67, "hi": 0.58}
    assert envelope["ttft_mape_diff"] == {"lo": -0.5, "hi": 0.6}
    # The curve's third test: TTFT lower beyond any null, its SLO's dip within their reach.
    after = _diffs((-1.07, -0.65), (-0.56, 0.16))
    assert beyond(after, envelope) == {
        "ttft_mape_diff": "below",
        "slo_diff": "within",
        "early_slo_diff": "within",
    }
    assert beyond(_diffs((0.7, 0.9), (0.6, 0.9)), envelope)["slo_diff"] == "above"
