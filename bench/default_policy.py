"""A new pool's default policy, chosen from the fair protocol's full-scale results by the rule in
docs/benchmarks.md ("New pools' default policy"); prints JSON.

    python bench/default_policy.py                       # apply the rule to the three suites
    python bench/default_policy.py --check azure         # run the chosen spec on a suite

The rule reads ``docs/results/{mooncake,azure,hetero}_protocol.json`` only:

1. The candidates are the protocol's EPP-expressible policies at the options it tuned: llm-d's
   default chain (``llm-d-default``), the load+prefix weightings (``llm-d-322``, ``llm-d-111``)
   and upstream's predicted-latency chain with the weighted-random picker (``llm-d-predicted``,
   ``llm-d-predicted-best``). Headroom's protocol policy (``headroom``) is not one: its best-fit
   picker and joint P/D selection are Headroom-only (the EPP config export writes the
   weighted-random picker). LMetric, Dynamo, SGLang, round-robin and least-request are not
   chains a policy can name for an unchanged EPP.
2. A candidate's figure on a suite: per replicate (slice *i*, seed *i*) its SLO attainment
   averaged over the suite's evaluation loads; the mean and min-max over the replicates. Its
   score: the mean of its three suite means.
3. The leader is the highest score. A candidate is level with the leader when on every suite the
   leader's lead is within the larger of the two min-max spreads (the protocol's rule).
4. Among the leader and the candidates level with it, a predicted-latency chain is preferred
   (the highest-scoring one): only that chain asks Headroom for predictions and posts the
   training samples, so only a pool routed by it feeds its own models, the advisor's
   ``pool-replay`` and desired replicas. Otherwise the leader.
5. One fixed config: where the protocol tuned a candidate's options differently per suite, the
   option set with the highest tuning-slice attainment summed over the suites.

``--check`` runs the chosen spec as a Headroom pool runs it (the predicted-latency chain served
Headroom's predictions, the advisor's ``protocol_policy``) on the suite's evaluation slices,
loads and seeds: the rule's figures for a predicted chain are upstream's own predictor's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Final

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.advisor.search import protocol_policy
from backend.policies.schemas import UPSTREAM_SPEC, PolicySpec
from backend.sim.protocol import SUITES, Job, arrivals, figures, simulate_trace
from backend.sim.protocol import _pool as suite_pool
from backend.sim.routers import POLICIES
from backend.sim.view import Slo
from bench._common import ROOT, machine

SUITE_NAMES: Final = ("mooncake", "azure", "hetero")
PREDICTED: Final = ("llm-d-predicted", "llm-d-predicted-best")
CANDIDATES: Final = ("llm-d-default", "llm-d-322", "llm-d-111", *PREDICTED)
RESULTS: Final = ROOT / "docs" / "results"


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "mean": round(float(np.mean(values)), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def suite_figures(data: dict[str, Any], policy: str) -> dict[str, Any]:
    rows = sorted((r for r in data["results"] if r["policy"] == policy), key=lambda r: r["load"])
    replicates = len(rows[0]["runs"])
    per_slice = [
        float(np.mean([r["runs"][i]["slo_attainment"] for r in rows])) for i in range(replicates)
    ]
    return {
        "options": rows[0]["options"],
        "per_load": {str(r["load"]): r["slo_attainment"] for r in rows},
        "loads_averaged": _stats(per_slice),
        "per_slice": [round(x, 4) for x in per_slice],
    }


def _spread(s: dict[str, float]) -> float:
    return s["max"] - s["min"]


def choose(suites: dict[str, dict[str, Any]]) -> dict[str, Any]:
    table = {p: {s: suite_figures(d, p) for s, d in suites.items()} for p in CANDIDATES}
    score = {
        p: round(float(np.mean([f["loads_averaged"]["mean"] for f in table[p].values()])), 4)
        for p in CANDIDATES
    }
    leader = max(CANDIDATES, key=lambda p: score[p])

    def level(p: str) -> bool:
        for s in suites:
            a, b = table[leader][s]["loads_averaged"], table[p][s]["loads_averaged"]
            if a["mean"] - b["mean"] > max(_spread(a), _spread(b)):
                return False
        return True

    tied = [p for p in CANDIDATES if level(p)]
    predicted = [p for p in tied if p in PREDICTED]
    chosen = max(predicted, key=lambda p: score[p]) if predicted else leader
    # One option set for every suite: the best summed over the suites' tuning slices.
    tried: dict[str, float] = {}
    for data in suites.values():
        for t in data["tuning"][chosen]["tried"]:
            key = json.dumps(t["options"], sort_keys=True)
            tried[key] = tried.get(key, 0.0) + t["slo_attainment"]
    options = json.loads(max(tried, key=lambda k: tried[k])) if tried else {}
    paired = {
        s: [
            round(a - b, 4)
            for a, b in zip(
                table[leader][s]["per_slice"], table[chosen][s]["per_slice"], strict=True
            )
        ]
        for s in suites
    }
    return {
        "candidates": table,
        "score": score,
        "leader": leader,
        "level_with_leader": tied,
        "chosen": chosen,
        "chosen_options": options,
        "tuning_sums": {k: round(v, 4) for k, v in tried.items()},
        "leader_minus_chosen_per_slice": paired,
    }


def check(suite_name: str, spec: PolicySpec) -> dict[str, Any]:
    """``spec`` as Headroom runs it on the suite's evaluation slices (slice i + 1, seed i)."""
    suite = SUITES[suite_name]
    policy, options = protocol_policy(spec)
    factory = POLICIES[policy]
    slo = Slo(suite.ttft_slo_ms, suite.tpot_slo_ms)
    out: dict[str, Any] = {}
    for load in suite.loads:
        runs = []
        for i, seed in enumerate((0, 1, 2)):
            job = Job(suite, 1 + i, suite.slice_requests, load, policy, options, seed, ())
            cpu = time.process_time()
            result = simulate_trace(
                arrivals(job),
                list(suite_pool(suite)),
                slo,
                lambda t, s=seed: factory(t, s, dict(options)),
                seed,
            )
            run = figures(result, slo)
            run["cpu_s"] = round(time.process_time() - cpu, 2)
            runs.append(run)
            print(
                f"{suite_name} load {load:g} seed {seed}: {run['slo_attainment']}", file=sys.stderr
            )
        out[str(load)] = {
            "slo_attainment": _stats([r["slo_attainment"] for r in runs]),
            "runs": runs,
        }
    per_slice = [
        float(np.mean([out[str(x)]["runs"][i]["slo_attainment"] for x in suite.loads]))
        for i in range(3)
    ]
    return {
        "suite": suite_name,
        "policy": policy,
        "options": dict(options),
        "per_load": out,
        "loads_averaged": _stats(per_slice),
        "per_slice": [round(x, 4) for x in per_slice],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", choices=SUITE_NAMES, action="append", default=[])
    args = parser.parse_args()
    suites = {s: json.loads((RESULTS / f"{s}_protocol.json").read_text()) for s in SUITE_NAMES}
    out: dict[str, Any] = {
        "rule": "docs/benchmarks.md, New pools' default policy",
        "sources": {s: suites[s]["provenance"] for s in SUITE_NAMES},
        **choose(suites),
        # What this code's new-pool default changes from upstream's values.
        "new_pool_spec_vs_upstream": {
            k: v
            for k, v in PolicySpec().model_dump(mode="json").items()
            if UPSTREAM_SPEC.model_dump(mode="json")[k] != v
        },
    }
    if args.check:
        out["machine"] = machine()
        out["check"] = {s: check(s, PolicySpec()) for s in args.check}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
