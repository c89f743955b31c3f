"""Schemathesis against the OpenAPI schema of every route of a real, trained server: no 5xx,
no undocumented status code, no response that violates its documented schema."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from backend.sim.entries import training_entries
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows
from tests.server import headroom_process

CHECKS = ",".join(
    (
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
    )
)
BIN = Path(sys.executable).parent


def _token(cwd: Path, user: str, role: str, scopes: str) -> str:
    """A user and token made with the `headroom` command, as an operator would."""
    headroom = str(BIN / "headroom")
    env = {"PATH": str(BIN)}
    subprocess.run(
        [headroom, "user", "create", user, "--role", role, "--password", "fuzz-password-1"],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [headroom, "user", "token", user, "--scopes", scopes],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def _fuzz(url: str, token: str, *filters: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(BIN / "schemathesis"),
            "run",
            f"{url}/openapi.json",
            "--checks",
            CHECKS,
            "--max-examples",
            "8",
            "--seed",
            "1",
            "-H",
            f"Authorization: Bearer {token}",
            *filters,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_schemathesis_finds_no_server_error_or_schema_violation(tmp_path: Path) -> None:
    env = {"HEADROOM_TRAINING__INTERVAL_S": "1", "HEADROOM_AUTH__REQUIRED": "true"}
    rows = sample_rows(300, np.random.default_rng(0), load_profile("a100-llama3-8b"))
    with headroom_process(env, tmp_path) as (url, _):
        # A trained default pool: "no model yet" (503 by upstream's contract) is not a bug.
        r = httpx.post(f"{url}/add_training_data_bulk", json={"entries": training_entries(rows)})
        assert r.status_code == 202
        deadline = time.monotonic() + 60
        while not httpx.get(f"{url}/status").json()["models_exist"]["tpot_model"]:
            assert time.monotonic() < deadline, "the server did not train"
            time.sleep(0.2)
        # Everything, as a data-plane client: it can create no pool, so every pool it can
        # predict for has a model.
        data_plane = _fuzz(url, _token(tmp_path, "epp", "viewer", "ingest,predict"))
        # The control plane, as an admin (new pools appear here; no predictions are asked).
        control = _fuzz(
            url,
            _token(tmp_path, "ops", "admin", "admin"),
            "--include-path-regex",
            "^/v1/(pools|policies|objectives|models)",
        )
    for result in (data_plane, control):
        assert result.returncode == 0, result.stdout[-6000:]
        assert "Tested: " in result.stdout
