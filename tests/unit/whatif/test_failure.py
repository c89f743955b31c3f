"""A what-if run that raises: the job ends failed with the error, the console says so and stops
polling; the runner goes on with the next job."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from backend.app import create_app
from backend.settings import Settings
from tests.console import (
    console_state,
    finished,
    run_failing_whatif,
    sign_in_new_user,
    start_whatif,
)


def test_a_failing_run_is_recorded_and_shown_and_the_next_one_runs(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'whatif.db'}")
    with TestClient(create_app(settings)) as client:
        sign_in_new_user(client, "ada")
        runner = console_state(client).whatif
        assert runner is not None
        run_failing_whatif(client, runner)
        # The failure took nothing down with it: the runner's thread runs the next job.
        good = finished(runner, start_whatif(runner, "azure-code").id)
        assert good.status == "done", good.message
        assert good.result is not None and good.result["requests"] == 40
