"""The advisor against the peers at their best, on the same held-out slices and seeds.

For one suite of the benchmark protocol (``mooncake``, ``azure-code``, ``azure-code-mixed``: the
mixed A100/H100 pool, ``mooncake-pd``: the P/D layout) at its higher tuning load:

1. the advisor's search (``backend.advisor.search.advise``) on the suite's trace, timed on one
   process (the "one core" figure);
2. the protocol (``backend.sim.protocol.run_protocol``) for every peer at that load: each peer's
   options tuned on the same tuning slice, then the same evaluation slices with the same seeds
   (slice ``i + 1`` with seed ``i``), so the advisor's pick and each peer are compared run for
   run;
3. the pick (the best EPP-expressible candidate on the held-out slices) against each peer: the
   protocol's verdict (a lead counts only beyond both min-max spreads) and the slice-by-slice
   difference.

Prints JSON (and writes it with ``--out``). Reduced scale by default: say so when quoting it.
With ``--cache`` the peers' simulations are shared with the protocol's runs
(``bench/routing.py --protocol ... --cache DIR``): the same jobs on the same code are read, not
rerun. With ``--peers FILE`` they are taken from a finished protocol result of the same suite,
slice size and seeds (checked; the code it ran on is not).

    python bench/advisor.py --suite azure-code --requests 2000 --cache results/runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.advisor.search import Budget, advise
from backend.advisor.workloads import SHIPPED, shipped_trace
from backend.policies.service import PRESETS
from backend.sim.protocol import (
    SUITES,
    ProtocolConfig,
    compare,
    machine,
    run_protocol,
)
from backend.sim.routers import OURS, OURS_GREEDY_PD, OURS_NO_HOLD, OURS_NO_PROGRESS, REFERENCE

# Headroom's own policy, its experiments and ablations, and the look-ahead reference.
NOT_PEERS = (OURS, OURS_NO_HOLD, OURS_NO_PROGRESS, OURS_GREEDY_PD, REFERENCE)


def peers_of(policies: tuple[str, ...]) -> tuple[str, ...]:
    """The peers: every policy of the suite that a platform team can run without Headroom."""
    return tuple(p for p in policies if p not in NOT_PEERS)


def _against_peers(row: dict[str, Any], peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One ranked candidate against each peer at its best: the protocol's verdict and the
    slice-by-slice difference in points (the same slices and seeds)."""
    runs = row["held_out"]["slo_attainment"]
    mine = row["held_out"]["slo_attainment_runs"]
    out = []
    for peer_row in peers:
        peer = peer_row["slo_attainment"]
        per_slice = [
            round(100 * (a - b["slo_attainment"]), 1)
            for a, b in zip(mine, peer_row["runs"], strict=True)
        ]
        out.append(
            {
                "peer": peer_row["policy"],
                "options": peer_row["options"],
                "peer_slo_attainment": peer,
                "verdict": compare(runs, peer),
                "points_per_slice": per_slice,
            }
        )
    return out


def _check_same_runs(
    protocol: dict[str, Any],
    suite: str,
    requests: int,
    seeds: int,
    load: float,
    peers: tuple[str, ...],
) -> None:
    """Refuse a protocol result whose peers did not run on the advisor's held-out slices and
    seeds, at its load, on the default simulator; the code it ran on is the caller's word."""
    described = protocol["protocol"]
    wrong = {
        "suite": (described["suite"]["name"], suite),
        "slice_requests": (described["slice_requests"], requests),
        "seeds": (described["seeds"], list(range(seeds))),
        "sim_options": (described["sim_options"], {}),
        "load_basis": (described["load_basis"], "trace"),
    }
    bad = {k: v for k, v in wrong.items() if v[0] != v[1]}
    missing = sorted(set(peers) - {r["policy"] for r in protocol["results"] if r["load"] == load})
    problems = ([f"{k}: {v[0]} (the advisor's: {v[1]})" for k, v in bad.items()]) + (
        [f"no runs at load {load:g} of {', '.join(missing)}"] if missing else []
    )
    if problems:
        raise SystemExit("--peers: not the advisor's runs: " + "; ".join(problems))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=sorted(SHIPPED), default="azure-code")
    parser.add_argument("--requests", type=int, default=500, help="requests per slice")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--survivors", type=int, default=6)
    parser.add_argument("--finalists", type=int, default=3)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--cache",
        type=Path,
        help="the protocol's simulation cache (bench/routing.py --cache): the peers' runs are "
        "read from it where a protocol run of the same code already made them, and added to it",
    )
    parser.add_argument(
        "--peers",
        type=Path,
        help="a finished protocol result of this suite (bench/routing.py --protocol ... --out) "
        "at these slice sizes and seeds, made on this code: its peers at the advisor's load are "
        "compared instead of being run again",
    )
    parser.add_argument(
        "--no-peers", action="store_true", help="time the advisor only (no protocol run)"
    )
    args = parser.parse_args()
    budget = Budget(args.requests, args.seeds, args.survivors, args.finalists)
    # The pool under advice runs upstream's defaults (the preset), as in the runs this bench
    # has reported; a new pool's default (`PolicySpec()`) is one of the candidates.
    active = PRESETS["upstream"]
    workload = shipped_trace(args.suite, budget, active)
    suite = dataclasses.replace(SUITES[SHIPPED[args.suite]], slice_requests=args.requests)
    suite_peers = peers_of(suite.policies)
    protocol: dict[str, Any] | None = None
    if args.peers is not None and not args.no_peers:
        # Checked before the search: a file of other runs is refused before minutes are spent.
        protocol = json.loads(args.peers.read_text(encoding="utf-8"))
        _check_same_runs(
            protocol, suite.name, args.requests, args.seeds, workload.load, suite_peers
        )
    started, cpu_started = time.perf_counter(), time.process_time()
    advice = advise(workload, active, budget, lambda f, m: print(f"[{f:.0%}] {m}", file=sys.stderr))
    advice_s = time.perf_counter() - started
    # CPU seconds of this one process: what "on one core" means on a shared machine, where the
    # wall time also counts the other processes' turns.
    advice_cpu_s = time.process_time() - cpu_started
    full = SUITES[SHIPPED[args.suite]].slice_requests
    timing = {
        "wall_s_one_process": round(advice_s, 1),
        "cpu_s": round(advice_cpu_s, 1),
        "simulations": advice["simulations"],
        "extrapolated_cpu_s_at_protocol_scale": round(advice_cpu_s * full / args.requests, 1),
    }
    if args.no_peers:
        print(json.dumps({"suite": args.suite, "requests": args.requests, **timing}, indent=2))
        return

    if protocol is None:
        protocol = run_protocol(
            ProtocolConfig(
                suite,
                seeds=tuple(range(args.seeds)),
                loads=(workload.load,),
                policies=suite_peers,
                capacity_steps=0,
                workers=1,
                cache=args.cache,
            )
        )
    peers = [
        r for r in protocol["results"] if r["load"] == workload.load and r["policy"] in suite_peers
    ]
    pick = advice["ranking"][advice["pick"]]
    comparisons = _against_peers(pick, peers)
    # The best Headroom-only candidate (needs /v1/schedule) against the same peers.
    headroom_only = next((r for r in advice["ranking"] if r["kind"] == "schedule"), None)
    out: dict[str, Any] = {
        "scale": (
            f"full: {full} requests per slice, as the protocol"
            if args.requests == full
            else f"reduced: {args.requests} requests per slice (the protocol's is {full})"
        ),
        "suite": args.suite,
        "load": workload.load,
        "budget": dataclasses.asdict(budget),
        "advisor": {
            **timing,
            "pick": {k: pick[k] for k in ("label", "kind", "options", "held_out", "vs_active")},
            "ranking": [
                {k: r[k] for k in ("label", "kind", "held_out", "vs_active", "appliable")}
                for r in advice["ranking"]
            ],
            "screened": advice["screened"],
        },
        # Where the peers' runs came from: the file named, or this run (with how many of its
        # simulations were read from the cache).
        "peers_from": str(args.peers) if args.peers is not None else "this run",
        "peers_timing": protocol["timing"],
        "pick_vs_peers": comparisons,
        "headroom_only": None
        if headroom_only is None
        else {
            "label": headroom_only["label"],
            "held_out": headroom_only["held_out"],
            "vs_peers": _against_peers(headroom_only, peers),
        },
        "machine": machine(),
    }
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
