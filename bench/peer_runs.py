"""Seeded simulator runs of the peers whose scoring lives in the scheduling library (llm-d's
default chain, the load+prefix weightings, LMetric), to diff two commits: the figures must be
identical when only the code's place changed.

Prints JSON (each run's SLO attainment and TTFT/TPOT p90, and the machine):

    python bench/peer_runs.py > after.json   # on each commit, then diff the two files
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.advisor.search import Budget
from backend.advisor.workloads import shipped_trace
from backend.policies.service import PRESETS
from backend.sim.protocol import figures, machine, simulate_trace
from backend.sim.routers import POLICIES

RUNS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llm-d-default", {}),
    ("llm-d-default", {"affinity_threshold": 0.5, "max_tokens_in_flight_penalty": 16384}),
    ("llm-d-322", {}),
    ("llm-d-111", {}),
    ("lmetric", {}),
    ("lmetric", {"pending": False, "batch": "scraped"}),
)


def main() -> None:
    out: dict[str, Any] = {}
    for suite in ("mooncake", "azure-code"):
        # The advisor's workload at its suite's higher load; held-out part 1, 200 requests.
        w = shipped_trace(suite, Budget(requests=200, seeds=1), PRESETS["upstream"])
        for name, options in RUNS:
            for seed in (0, 1):
                run = simulate_trace(
                    w.parts[1],
                    list(w.pool),
                    w.slo,
                    lambda t, n=name, o=options, s=seed: POLICIES[n](t, s, dict(o)),
                    seed,
                    w.sim_options,
                )
                f = figures(run, w.slo)
                keys = ("slo_attainment", "ttft_p90_ms", "tpot_p90_ms")
                out[f"{suite} {name} {options} seed {seed}"] = {k: f[k] for k in keys}
    print(json.dumps({"runs": out, "machine": machine()}, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
