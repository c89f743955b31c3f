"""Slice-by-slice differences between policies of one protocol JSON (same slice, same seed).

    .venv/bin/python bench/paired.py RESULT.json --ours A,B --peers C,D

Prints JSON: per load and pair, SLO attainment difference in points (mean, min, max over the
slices) and the TTFT p90 difference in ms per slice. The protocol's own headline compares only
``headroom`` with its peers; this compares any policies the run holds (ablations included).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def paired(data: dict[str, Any], ours: list[str], peers: list[str]) -> list[dict[str, Any]]:
    rows = {(r["load"], r["policy"]): r["runs"] for r in data["results"]}
    out = []
    for load, policy in sorted(k for k in rows if k[1] in ours):
        for peer in peers:
            a, b = rows[(load, policy)], rows[(load, peer)]
            diff = [
                100 * (x["slo_attainment"] - y["slo_attainment"]) for x, y in zip(a, b, strict=True)
            ]
            out.append(
                {
                    "load": load,
                    "policy": policy,
                    "peer": peer,
                    "slo_points": {
                        "mean": round(sum(diff) / len(diff), 1),
                        "min": round(min(diff), 1),
                        "max": round(max(diff), 1),
                    },
                    "ttft_p90_ms_per_slice": [
                        round(x["ttft_p90_ms"] - y["ttft_p90_ms"])
                        for x, y in zip(a, b, strict=True)
                    ],
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("result", type=Path)
    parser.add_argument("--ours", required=True, help="comma-separated policy names")
    parser.add_argument("--peers", required=True, help="comma-separated policy names")
    args = parser.parse_args()
    data = json.loads(args.result.read_text(encoding="utf-8"))
    for row in paired(data, args.ours.split(","), args.peers.split(",")):
        print(json.dumps(row))


if __name__ == "__main__":
    main()
