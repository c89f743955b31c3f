"""Sampled rows (`backend.sim.latency.sample_rows`) as upstream wire entries and requests."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FRACTION_FIELDS = ("kv_cache_percentage", "prefix_cache_score")
COUNT_FIELDS = (
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "num_tokens_generated",
    "prefill_tokens_in_flight",
    "decode_tokens_in_flight",
)


def prediction_requests(rows: dict[str, npt.NDArray[Any]]) -> list[dict[str, Any]]:
    """The feature part of each row, as `/predict/bulk/strict` takes it."""
    n = int(np.shape(rows["input_token_length"])[0])
    fractions = {f: rows[f].astype(float).tolist() for f in FRACTION_FIELDS}
    counts = {f: rows[f].astype(int).tolist() for f in COUNT_FIELDS}
    return [
        {**{f: fractions[f][i] for f in FRACTION_FIELDS}, **{f: counts[f][i] for f in COUNT_FIELDS}}
        for i in range(n)
    ]


def training_entries(
    rows: dict[str, npt.NDArray[Any]], *, as_epp: bool = True
) -> list[dict[str, Any]]:
    """Labelled entries. As the EPP sends them (`as_epp`), each row becomes a TTFT sample
    (`actual_tpot_ms = 0`) and a TPOT sample (`actual_ttft_ms = 0`); otherwise one entry
    carries both labels."""
    ttft = rows["actual_ttft_ms"].astype(float).tolist()
    tpot = rows["actual_tpot_ms"].astype(float).tolist()
    out: list[dict[str, Any]] = []
    for i, features in enumerate(prediction_requests(rows)):
        if as_epp:
            out.append({**features, "actual_ttft_ms": ttft[i], "actual_tpot_ms": 0.0})
            out.append({**features, "actual_ttft_ms": 0.0, "actual_tpot_ms": tpot[i]})
        else:
            out.append({**features, "actual_ttft_ms": ttft[i], "actual_tpot_ms": tpot[i]})
    return out
