"""Saturation computed in the API process's helper process: a real spawned process, reading the
real database, sending its reports to the API, started again when it dies."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient

from backend.app import create_app
from backend.capacity.helper import CapacityHelper
from backend.capacity.shared import REPORTS_KEY, decode
from backend.settings import Settings
from tests.conftest import redis_url_for_tests
from tests.integration.test_capacity import post, set_slo, traffic
from tests.integration.test_prediction import runtime_of, train_and_load


def _helped(settings: Settings) -> Settings:
    # The pods as they stand (no replay): a level that does not move with the time of a tick,
    # so that the helper's and this process's computations can be compared.
    capacity = settings.capacity.model_copy(
        update={"helper_process": True, "interval_s": 0.5, "arrival_window_s": 0.0}
    )
    return settings.model_copy(update={"capacity": capacity})


@pytest.fixture
def helped(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(_helped(settings))) as c:
        yield c


def _wait(client: TestClient, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + 120  # a spawned helper imports the models' libraries first
    while True:
        body: dict[str, Any] = client.get("/v1/pools/default/saturation").json()
        if done(body):
            return body
        assert time.monotonic() < deadline, f"the helper sent no such report: {body}"
        time.sleep(0.2)


def _helper(client: TestClient) -> CapacityHelper:
    helper = runtime_of(client).capacity_helper
    assert helper is not None
    return helper


def test_the_helper_computes_what_the_api_process_would_and_the_api_serves_it(
    helped: TestClient,
) -> None:
    runtime = runtime_of(helped)
    helper = _helper(helped)
    post(helped, traffic(400, pods=3))
    set_slo(helped, 2000, 100)
    train_and_load(helped)  # activates the models: the helper loads them from the registry
    body = _wait(helped, lambda b: b["status"] == "ok" and b["fresh_pods"] == 3)
    assert helper.pid is not None and helper.pid != os.getpid()
    # The same samples, models and policy computed here give the same report.
    reports, _, _ = runtime.capacity.compute()
    here = reports["default"].saturation
    assert here is not None
    assert body["saturation"] == pytest.approx(here.level)
    assert {p["pod"]: p["saturation"] for p in body["pods"]} == pytest.approx(
        {p.name: p.level for p in here.pods}
    )
    # Served from the API process's memory: its history and gauges carry the helper's ticks.
    assert runtime.capacity.history("default")[-1][1] == pytest.approx(here.level)
    text = helped.get("/metrics").text
    assert f'headroom_pool_saturation{{pool="default"}} {float(body["saturation"])}' in text


def _leader() -> int | None:
    """The pid of the helper whose reports Redis holds (None: none yet)."""
    raw = redis.Redis.from_url(redis_url_for_tests()).get(REPORTS_KEY)
    return None if raw is None else int(decode(raw)[2].rsplit(":", 1)[1])


def test_replicas_serve_one_helpers_computation_and_a_killed_one_is_replaced(
    settings: Settings,
) -> None:
    replicas = _helped(settings)
    with TestClient(create_app(replicas)) as a, TestClient(create_app(replicas)) as b:
        post(a, traffic(400, pods=3))
        set_slo(a, 2000, 100)
        train_and_load(a)
        _wait(a, lambda body: body["status"] == "ok")

        def same() -> dict[str, Any]:
            # Two computations never share a time to the microsecond: one body on both
            # replicas is one helper's tick, handed on by the other.
            deadline = time.monotonic() + 60
            while True:
                one: dict[str, Any] = a.get("/v1/pools/default/saturation").json()
                if one["status"] == "ok" and one == b.get("/v1/pools/default/saturation").json():
                    return one
                assert time.monotonic() < deadline, "the replicas never served the same tick"
                time.sleep(0.1)

        first = same()
        helpers = {_helper(a).pid, _helper(b).pid}
        leader = _leader()
        assert leader is not None and leader in helpers and len(helpers) == 2
        os.kill(leader, signal.SIGKILL)
        # The other helper takes the lock once it expires; the dead one's replica starts a
        # new helper, which now follows. Both go on serving one tick, a newer one.
        deadline = time.monotonic() + 60
        while _leader() in (None, leader):
            assert time.monotonic() < deadline, "no helper took over"
            time.sleep(0.2)
        assert _leader() in helpers - {leader}
        later = _wait(a, lambda body: body["computed_at"] > first["computed_at"])
        assert later["saturation"] == pytest.approx(first["saturation"])  # the same pods
        assert same()["computed_at"] > first["computed_at"]
        # The replica whose helper was killed started another one.
        deadline = time.monotonic() + 60
        while leader in {_helper(a).pid, _helper(b).pid} or None in {
            _helper(a).pid,
            _helper(b).pid,
        }:
            assert time.monotonic() < deadline, "the killed helper was not replaced"
            time.sleep(0.2)
