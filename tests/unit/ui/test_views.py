"""The Overview's figures and warnings, on a real (SQLite) database built by the migrations."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from backend import migrate
from backend.capacity.models import DesiredReplicasPoint
from backend.capacity.service import PoolReport
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.pools.models import Pool
from backend.pools.service import ensure_default_pool, get_pool
from backend.predictor.window import WindowSpec
from backend.registry import service as registry
from backend.registry.models import ActiveModel, ModelVersion
from backend.samples.models import TargetCode
from backend.samples.schemas import TrainingEntry
from backend.samples.service import ingest
from backend.scheduling.saturation import Headroom, PodLevel, Saturation
from backend.settings import Settings, UISettings, WindowSettings
from backend.ui.views import overview, replica_chart, saturation_panel
from tests.factories import entry

SPEC = WindowSpec.from_settings(WindowSettings())


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    url = f"sqlite:///{tmp_path / 'views.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    with unit_of_work(sessions) as s:
        ensure_default_pool(s)
    with sessions() as s:
        yield s
    engine.dispose()


def _ingest(session: Session, n: int, **fields: object) -> None:
    entries = [TrainingEntry.model_validate(entry(timestamp=None, **fields)) for _ in range(n)]
    ingest(session, 1, entries, SPEC, 0.1, random.Random(0))
    session.commit()


def _version(
    session: Session, mape: float, age_s: float, through: int, active: bool = False
) -> ModelVersion:
    at = datetime.now(UTC) - timedelta(seconds=age_s)
    version = ModelVersion(
        pool_id=1,
        target=int(TargetCode.TTFT),
        kind="hybrid",
        objective="mean",
        quantile=0.9,
        status="active" if active else "retired",
        gate_reason="",
        metrics={"mape": mape, "median_bias": -0.01},
        n_train=90,
        n_test=10,
        window_max_id=through,
        train_seconds=0.1,
        training_started_at=at,
        created_at=at,
        artifact=b"",
        artifact_bytes=0,
    )
    session.add(version)
    session.flush()
    if active:
        session.add(
            ActiveModel(
                pool_id=1,
                target=int(TargetCode.TTFT),
                version_id=version.id,
                activated_at=at,
                activated_by="test",
            )
        )
    session.commit()
    return version


def _pool(session: Session) -> Pool:
    return get_pool(session, "default")


def test_rate_last_sample_and_live_error(session: Session) -> None:
    _ingest(session, 60, actual_ttft_ms=100.0, predicted_ttft_ms=110.0)
    _version(session, 0.05, age_s=5, through=60, active=True)
    (status,) = overview(session, [_pool(session)], Settings())
    assert status.samples_per_min == 60  # all arrived within the last minute
    assert status.last_sample_at is not None
    ttft = status.targets[0]
    assert ttft.live is not None
    assert ttft.live.n == 60
    assert ttft.live.mape == pytest.approx(0.1)
    assert ttft.live.bias == pytest.approx(0.1)
    assert not ttft.waiting_samples
    # Live 10 % against held-out 5 %, the same as before the model's training: routed
    # traffic's usual live error, not a change (the gate's drift rule does not hold).
    assert not any("live error" in w for w in status.warnings)


def _max_ttft_id(session: Session) -> int:
    from backend.samples.repository import max_id

    return max_id(session, 1, TargetCode.TTFT)


@pytest.mark.parametrize(("newer_ms", "warned"), [(115.0, False), (150.0, True)])
def test_the_live_error_warns_when_the_gates_drift_rule_holds(
    session: Session, newer_ms: float, warned: bool
) -> None:
    """Routed traffic errs 10 % against a held-out 5 %; the warning asks what the trainer asks
    before it replaces a model: twice the held-out error, twice the usual live error and above
    its worst run. 15 % is above twice the held-out but not twice the usual 10 % (the earlier
    rule, 1.5x the held-out and 2 points, warned on it)."""
    _ingest(session, 200, actual_ttft_ms=100.0, predicted_ttft_ms=110.0)
    _version(session, 0.05, age_s=5, through=_max_ttft_id(session), active=True)
    _ingest(session, 100, actual_ttft_ms=100.0, predicted_ttft_ms=newer_ms)
    (status,) = overview(session, [_pool(session)], Settings())
    drift = [w for w in status.warnings if "live error" in w]
    if not warned:
        assert drift == []
        return
    assert drift == [
        "TTFT live error 50.0 % on the 100 samples since the active model's training is above "
        "2x its held-out 5.0 % and 2x the usual live error of routed traffic (10.0 % on 200 "
        "older samples): the traffic has changed, and the next training round replaces the "
        "model with one of the newer samples"
    ]


def test_no_model_yet_is_flagged_once_samples_arrive(session: Session) -> None:
    (status,) = overview(session, [_pool(session)], Settings())
    assert status.warnings == []
    _ingest(session, 5)
    (status,) = overview(session, [_pool(session)], Settings())
    assert status.warnings == ["TTFT: samples are arriving but no model is active yet"]


def test_a_model_is_stale_when_samples_wait_and_training_is_old(session: Session) -> None:
    _ingest(session, 20)
    _version(session, 0.05, age_s=3600, through=10, active=True)
    settings = Settings(ui=UISettings(stale_after_s=600))
    (status,) = overview(session, [_pool(session)], settings)
    assert status.targets[0].waiting_samples
    assert any("TTFT model is stale" in w for w in status.warnings)
    # Fresh enough: no warning.
    settings = Settings(ui=UISettings(stale_after_s=7200))
    (status,) = overview(session, [_pool(session)], settings)
    assert not any("stale" in w for w in status.warnings)


def test_rising_held_out_error_is_flagged(session: Session) -> None:
    _ingest(session, 20)
    for mape in (0.05, 0.05, 0.06, 0.05):
        _version(session, mape, age_s=60, through=20)
    _version(session, 0.12, age_s=5, through=20, active=True)
    (status,) = overview(session, [_pool(session)], Settings())
    assert any("TTFT error rising: newest held-out MAPE 12.0 %" in w for w in status.warnings)


def test_the_held_out_sample_takes_both_targets_alike(session: Session) -> None:
    # One entry with both labels makes two rows with consecutive ids: TTFT, TPOT, TTFT, ...
    entries = [
        TrainingEntry.model_validate(entry(timestamp=None, actual_tpot_ms=20.0))
        for _ in range(4000)
    ]
    ingest(session, 1, entries, SPEC, 1.0, random.Random(0))  # all held out
    session.commit()
    from backend.samples.repository import read_held_out

    for target in TargetCode:
        everything = read_held_out(session, 1, target).n
        sampled = read_held_out(session, 1, target, one_in=4).n
        assert everything == 4000
        assert 800 < sampled < 1200  # about a quarter, whatever the ids' parity


def _saturation(level: float) -> Saturation:
    head = Headroom(800, "a", 120.0, 10.0)
    pods = (PodLevel("a", level, 380.0, 40.0), PodLevel("b", level, 380.0, 40.0))
    return Saturation(level, 1.0 - level, pods, head, Headroom(4000, "b", -50.0, 10.0), 32)


def _activate_at(session: Session, version: ModelVersion, age_s: float) -> None:
    version.activated_at = datetime.now(UTC) - timedelta(seconds=age_s)
    session.commit()


def test_optimistic_bias_near_saturation_is_warned_per_version(session: Session) -> None:
    old = _version(session, 0.05, age_s=600, through=0)
    _activate_at(session, old, 600)
    # Under the old version: exact at every load.
    _ingest(session, 100, actual_ttft_ms=100.0, predicted_ttft_ms=100.0, num_request_waiting=9)
    new = _version(session, 0.05, age_s=0, through=100, active=True)
    _activate_at(session, new, 0)
    # Under the new one: exact when idle, 20 % optimistic in the top load decile.
    _ingest(session, 180, actual_ttft_ms=100.0, predicted_ttft_ms=100.0, num_request_waiting=0)
    _ingest(session, 30, actual_ttft_ms=100.0, predicted_ttft_ms=80.0, num_request_waiting=9)
    (status,) = overview(session, [_pool(session)], Settings())
    ttft = status.targets[0]
    assert ttft.high_load is not None
    assert ttft.high_load.bias == pytest.approx(-0.2)
    assert any("biased optimistic near saturation" in w for w in status.warnings)
    # Per version (what /v1/models and the Models page show): each row to the version active
    # when it was observed.
    per_version = registry.high_load_biases(session, [new, old])
    assert per_version[new.id].bias == pytest.approx(-0.2)
    assert per_version[old.id].bias == pytest.approx(0.0)
    assert per_version[old.id].n == 100


def test_the_overview_shows_the_saturation_panel_with_its_history(session: Session) -> None:
    sat = _saturation(0.25)
    now = datetime.now(UTC)
    report = PoolReport("default", "ok", now, sat, 2, ("gone",), 500.0, 50.0, 1)
    history = [(now - timedelta(seconds=2), 0.0), (now - timedelta(seconds=1), None), (now, 0.5)]
    panel = saturation_panel(report, history)
    assert panel is not None
    assert panel.level == 0.25
    assert panel.stale_pods == ("gone",)
    assert panel.p50 is not None and panel.p50.ttft_headroom_ms == 120.0
    # The tick without a level breaks the line; 0 at the bottom, the newest at the right.
    assert panel.lines == ["0.0,48.0", "240.0,24.0"]
    assert panel.span_s == pytest.approx(2.0)
    assert (panel.present_level, panel.next_level) == (None, None)  # nothing replayed
    assert panel.saturation_replicas is None  # a report without the count
    assert panel.count_lines == ()
    # The count and its ticks: 0 pods at the bottom, the most asked for at the top.
    counts = [(now - timedelta(seconds=2), 2.0), (now - timedelta(seconds=1), None), (now, 4.0)]
    counted = saturation_panel(
        dataclasses.replace(report, saturation_replicas=4), history, counts=counts
    )
    assert counted is not None and counted.saturation_replicas == 4
    assert (counted.count_lines, counted.count_top) == (("0.0,24.0", "240.0,0.0"), 4)
    # A mixed level shows its parts: the pods as they stand, the next interval's.
    mixed = dataclasses.replace(sat, present_level=0.1, next_level=0.475)
    parts = saturation_panel(dataclasses.replace(report, saturation=mixed), history)
    assert parts is not None and (parts.present_level, parts.next_level) == (0.1, 0.475)
    assert (parts.uncorrected_level, parts.record_bias) == (None, None)  # not corrected
    # A level corrected by its record shows the forecast and the bias taken off.
    fixed = dataclasses.replace(sat, level=0.3, uncorrected_level=0.25, record_bias=0.05)
    shown = saturation_panel(dataclasses.replace(report, saturation=fixed), history)
    assert shown is not None and (shown.level, shown.uncorrected_level) == (0.3, 0.25)
    assert shown.record_bias == 0.05
    assert saturation_panel(None, []) is None
    idle = saturation_panel(PoolReport("default", "no_slo", now, None, 0, (), None, None, 1), [])
    assert idle is not None and idle.level is None and idle.lines == []
    assert idle.reason == "the pool's policy sets no SLO"


def test_the_desired_replicas_chart_scales_to_the_most_pods_seen() -> None:
    now = datetime.now(UTC)

    def point(seconds_ago: float, replicas: int, pods: int) -> DesiredReplicasPoint:
        at = now - timedelta(seconds=seconds_ago)
        return DesiredReplicasPoint(
            pool_id=1,
            computed_at=at,
            replicas=replicas,
            met=True,
            attainment=0.9,
            current_pods=pods,
        )

    chart = replica_chart([point(60, 2, 4), point(30, 8, 4), point(0, 4, 6)])
    assert chart is not None and (chart.top, chart.points, chart.span_s) == (8, 3, 60.0)
    # 0 pods at the bottom (48), 8 at the top (0); oldest left, newest right.
    assert chart.desired == "0.0,36.0 120.0,0.0 240.0,24.0"
    assert chart.current == "0.0,24.0 120.0,24.0 240.0,12.0"
    assert replica_chart([]) is None
    report = PoolReport("default", "no_model", now, None, 0, (), 500.0, 50.0, 1)
    # The chart needs the current number: without it (no run stored) there is none.
    assert saturation_panel(report, [], None, [point(0, 4, 6)]).desired_chart is None  # type: ignore[union-attr]
