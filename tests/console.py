"""Driving the console from a TestClient: a user, a signed-in session, the console's state."""

from __future__ import annotations

import re
import time

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.routing import Mount

from backend.auth.service import create_user
from backend.db import unit_of_work
from backend.deps import Runtime
from backend.policies.schemas import PolicySpec
from backend.ui.app import PREFIX
from backend.ui.deps import ConsoleState
from backend.whatif.jobs import WhatIfJob
from backend.whatif.runner import WhatIfRunner

PASSWORD = "correct-horse-battery"
CSRF_INPUT = re.compile(r'name="csrf_token" value="([^"]+)"')


def console_state(client: TestClient) -> ConsoleState:
    app = client.app
    assert isinstance(app, FastAPI)
    console = next(r.app for r in app.routes if isinstance(r, Mount) and r.path == PREFIX)
    state: ConsoleState = console.state.console  # type: ignore[attr-defined]
    return state


def sign_in_new_user(client: TestClient, name: str, role: str = "admin") -> None:
    """Create the user and sign the client in as them, through the sign-in form."""
    runtime: Runtime = client.app.state.runtime  # type: ignore[attr-defined]
    with unit_of_work(runtime.sessions) as session:
        create_user(session, name, PASSWORD, role)  # type: ignore[arg-type]
    match = CSRF_INPUT.search(client.get("/ui/login").text)
    assert match is not None
    form = {"csrf_token": match.group(1), "username": name, "password": PASSWORD, "next": "/ui/"}
    response = client.post("/ui/login", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text


# A trace the simulator no longer ships (records outlive an upgrade for a day): the simulation
# itself raises on it.
RETIRED = "retired-trace"


def start_whatif(runner: WhatIfRunner, trace: str, requests: int = 40) -> WhatIfJob:
    return runner.start(
        pool="default",
        trace=trace,
        requested_by="ada",
        candidate=PolicySpec(default_ttft_slo_ms=1500).model_dump(mode="json"),
        baseline=PolicySpec().model_dump(mode="json"),
        baseline_version=1,
        requests=requests,
    )


def finished(runner: WhatIfRunner, job_id: str, seconds: float = 60) -> WhatIfJob:
    deadline = time.monotonic() + seconds
    while True:
        job = runner.get(job_id)
        assert job is not None
        if job.finished:
            return job
        assert time.monotonic() < deadline, f"job still {job.status}: {job.message}"
        time.sleep(0.05)


def run_failing_whatif(client: TestClient, runner: WhatIfRunner) -> WhatIfJob:
    """Start a run on a retired trace and check the whole failure path: the record says failed
    with the error and no result, and the console's page says so and stops polling."""
    job = finished(runner, start_whatif(runner, RETIRED).id)
    assert job.status == "failed"
    assert job.message.startswith("KeyError:") and RETIRED in job.message
    assert job.result is None
    page = client.get(f"/ui/whatif/jobs/{job.id}")
    assert page.status_code == 200
    assert 'data-status="failed"' in page.text
    assert "The simulation failed: KeyError" in page.text
    assert RETIRED in page.text
    assert "hx-get" not in page.text.split('id="job"', 1)[1].split(">", 1)[0]  # no more polls
    return job
