"""Put one run's rows of some policies into another protocol JSON of the same protocol, and
recompute its verdicts and headline. For a change that moves only those policies (the other
policies' runs are seeded and their code unchanged, so rerunning them would reproduce them).

    .venv/bin/python bench/merge_protocol.py BASE.json NEW.json --policies headroom > OUT.json

The two files must agree on the protocol (suite, slices, seeds, loads, capacity target and
steps); the merged file records where each policy's rows came from under ``provenance``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.sim.protocol import refresh


def _setting(data: dict[str, Any], key: str) -> Any:
    """A protocol setting, less what names the policies (which the two runs differ in)."""
    value = data["protocol"].get(key)
    if key == "policies":
        return None
    if key == "suite":
        return {k: v for k, v in value.items() if k != "policies"}
    return value


def merge(base: dict[str, Any], new: dict[str, Any], policies: list[str]) -> dict[str, Any]:
    differ = [k for k in base["protocol"] if _setting(base, k) != _setting(new, k)]
    if differ:
        raise ValueError(f"the files' protocols differ in {', '.join(differ)}")
    missing = [p for p in policies if not any(r["policy"] == p for r in new["results"])]
    if missing:
        raise ValueError(f"NEW has no rows of {', '.join(missing)}")
    out = dict(base)
    out["protocol"] = {
        **base["protocol"],
        "policies": {**base["protocol"]["policies"], **new["protocol"]["policies"]},
    }
    out["results"] = [r for r in base["results"] if r["policy"] not in policies] + [
        r for r in new["results"] if r["policy"] in policies
    ]
    out["results"].sort(key=lambda r: r["load"])
    out["tuning"] = {
        **base["tuning"],
        **{p: new["tuning"][p] for p in policies if p in new["tuning"]},
    }
    out["capacity"] = {
        **base["capacity"],
        **{p: new["capacity"][p] for p in policies if p in new["capacity"]},
    }
    provenance = dict(base.get("provenance") or {})
    provenance["merged"] = [
        *provenance.get("merged", []),
        {"policies": policies, "machine": new.get("machine"), "timing": new.get("timing")},
    ]
    out["provenance"] = provenance
    return refresh(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--policies", required=True, help="comma-separated")
    args = parser.parse_args(argv)
    base = json.loads(args.base.read_text(encoding="utf-8"))
    new = json.loads(args.new.read_text(encoding="utf-8"))
    try:
        merged = merge(base, new, [p for p in args.policies.split(",") if p])
    except ValueError as exc:
        parser.error(str(exc))
    print(json.dumps(merged, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
