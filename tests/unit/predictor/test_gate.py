"""The promotion gate's rules, as the trainer and the simulator both apply them."""

from __future__ import annotations

import numpy as np
import pytest

from backend.predictor import gate
from backend.predictor.gate import GateRules, LiveError, Shift, ShiftRules
from backend.predictor.rows import WindowRows
from backend.predictor.training import TrainParams, train_target
from tests.unit.predictor.synthetic import sample

LABELS = np.full(20, 100.0)
GOOD = np.full(20, 102.0)  # 2 % MAPE
BAD = np.full(20, 140.0)  # 40 % MAPE


def test_a_worse_candidate_is_rejected_and_says_why() -> None:
    decision = gate.judge(0.4, LABELS, BAD, GOOD, GateRules())
    assert not decision.activate
    assert "MAPE 0.4000 vs active 0.0200" in decision.reason
    assert "worse by more than 10%" in decision.reason


def test_a_better_or_slightly_worse_candidate_wins() -> None:
    assert gate.judge(0.02, LABELS, GOOD, BAD, GateRules()).activate
    slightly = np.full(20, 102.1)  # 2.1 % against 2 %: within the 10 % tolerance
    assert gate.judge(0.021, LABELS, slightly, GOOD, GateRules()).activate


def test_a_non_finite_candidate_never_wins() -> None:
    assert not gate.judge(float("nan"), LABELS, GOOD, None, GateRules()).activate
    nan_pred = np.full(20, np.nan)
    assert not gate.judge(0.01, LABELS, nan_pred, GOOD, GateRules()).activate


def test_a_quantile_model_is_scored_by_pinball_loss() -> None:
    # A p90 model sits above most labels: MAPE would prefer the median model, pinball loss not.
    rng = np.random.default_rng(0)
    labels = rng.lognormal(np.log(100), 0.3, 2000)
    median, p90 = np.median(labels), np.quantile(labels, 0.9)
    rules = GateRules(quantile=0.9)
    decision = gate.judge(1.0, labels, np.full(2000, p90), np.full(2000, median), rules)
    assert decision.activate and "pinball loss" in decision.reason
    assert not gate.judge(
        1.0, labels, np.full(2000, p90), np.full(2000, median), GateRules()
    ).activate


def test_too_few_held_out_rows_lets_the_newest_model_win() -> None:
    decision = gate.judge(0.4, LABELS[:5], BAD[:5], GOOD[:5], GateRules(min_test=10))
    assert decision.activate and "fewer than 10" in decision.reason


def test_drift_replaces_the_active_model_regardless() -> None:
    live = LiveError(n=50, mape=0.3)
    reason = gate.drift(live, 0.05, GateRules())
    assert reason is not None and reason.startswith("drift: live MAPE 0.3000")
    drifted = gate.judge(0.4, LABELS, BAD, GOOD, GateRules(), drifted=reason)
    assert drifted.activate and drifted.reason == reason
    assert gate.drift(live, 0.2, GateRules()) is None  # 0.3 is not above 2 x 0.2
    assert gate.drift(LiveError(n=5, mape=0.9), 0.05, GateRules()) is None  # too few rows


def test_drift_must_also_exceed_the_routers_earlier_live_error() -> None:
    live = LiveError(n=50, mape=0.3)
    # Routed traffic's usual live error: 0.3 is not above 2 x 0.2, so no drift, whatever the
    # held-out error says.
    assert gate.drift(live, 0.05, GateRules(), LiveError(n=500, mape=0.2)) is None
    reason = gate.drift(live, 0.05, GateRules(), LiveError(n=500, mape=0.1))
    assert reason is not None and "earlier live 0.1000 on 500 rows" in reason
    # Too few earlier rows to be a yardstick: the held-out rule alone, as before.
    assert gate.drift(live, 0.05, GateRules(), LiveError(n=5, mape=0.2)) is not None


def test_drift_must_also_exceed_the_worst_earlier_run_of_as_many_rows() -> None:
    live = LiveError(n=20, mape=0.3)
    usual = LiveError(n=500, mape=0.1)
    # A burst of 20 rows was as bad before, and no change followed: not drift.
    assert gate.drift(live, 0.05, GateRules(), usual, earlier_worst=0.35) is None
    reason = gate.drift(live, 0.05, GateRules(), usual, earlier_worst=0.25)
    assert reason is not None and "worst earlier run of 20 rows (0.2500)" in reason


def test_the_worst_run_is_the_highest_mape_of_consecutive_rows_from_the_newest_end() -> None:
    labels = np.full(7, 100.0)
    # Errors, oldest first: 0.5, 0.1, 0.1, 0.3, 0.3, 0.2, 0.0.
    predicted = np.array([150.0, 110.0, 90.0, 130.0, 70.0, 120.0, 100.0])
    # From the newest end in runs of 2: (0.2, 0.0), (0.3, 0.3), (0.1, 0.1); the oldest row is
    # left over.
    assert gate.worst_run(labels, predicted, 2) == pytest.approx(0.3)
    assert gate.worst_run(labels, predicted, 8) is None
    # A row without a prediction is skipped, not counted as a row of the run.
    with_gap = np.array([150.0, 110.0, np.nan, 90.0, 130.0, 70.0, 120.0])
    assert gate.worst_run(labels, with_gap, 3) == pytest.approx((0.3 + 0.3 + 0.2) / 3)


def test_live_error_skips_rows_without_a_prediction() -> None:
    live = gate.live_error([100.0, 100.0, 100.0], [110.0, np.nan, 0.0])
    assert live is not None and live.n == 1 and live.mape == pytest.approx(0.1)
    assert gate.live_error([100.0], [np.nan]) is None


def test_the_gate_scores_the_newest_rows_when_there_are_enough() -> None:
    ids = np.arange(1, 101)
    fresh = gate.newest(ids, since_id=80, min_rows=10)
    assert fresh.sum() == 20 and fresh[80:].all()
    assert gate.newest(ids, since_id=95, min_rows=10).all()  # 5 new rows: all are scored


def test_outliers_are_far_from_the_active_prediction_either_way() -> None:
    labels = np.array([100.0, 290.0, 310.0, 34.0, 30.0])
    assert gate.outliers(labels, np.full(5, 100.0), 3.0).tolist() == [
        False,
        False,
        True,
        False,
        True,
    ]


def test_a_shift_is_a_regime_only_after_it_held_over_rounds_and_time() -> None:
    rules = ShiftRules(hold_s=60)
    s = gate.next_shift(Shift(None), 0.9, now=0, rules=rules, before_id=7)
    assert s == Shift(0, 1, 7) and not gate.established(s, 0, rules)
    s = gate.next_shift(s, None, now=30, rules=rules)  # no new rows: nothing changes
    assert s == Shift(0, 1, 7)
    s = gate.next_shift(s, 0.8, now=40, rules=rules, before_id=20)
    assert s == Shift(0, 2, 7) and not gate.established(s, 40, rules)
    assert gate.established(gate.next_shift(s, 0.7, now=61, rules=rules), 61, rules)
    # A round of ordinary rows ends it: the burst has passed.
    assert gate.next_shift(s, 0.1, now=61, rules=rules) == Shift(None, 0)


def test_high_load_bias_is_the_median_bias_of_the_busiest_decile() -> None:
    loads = np.arange(100, dtype=np.float64)
    actual = np.full(100, 100.0)
    # Accurate at low load, 30 % optimistic on the 10 busiest rows.
    predicted = np.where(loads >= 90, 70.0, 100.0)
    bias = gate.high_load_bias(loads, actual, predicted)
    assert bias is not None and bias.n == 10 and bias.load_min == 90
    assert bias.median_bias == pytest.approx(-0.3)
    # Rows without a prediction are skipped: the busiest 10 scored rows are now loads 85-94.
    predicted[95:] = np.nan
    bias = gate.high_load_bias(loads, actual, predicted)
    assert bias is not None and bias.load_min == 85 and bias.median_bias == pytest.approx(-0.15)
    # Too few rows cannot be judged.
    assert gate.high_load_bias(loads[:50], actual[:50], predicted[:50]) is None
    with pytest.raises(ValueError):
        gate.high_load_bias(loads, actual[:5], predicted)


def test_an_optimistic_top_decile_is_drift_only_when_the_rule_is_on() -> None:
    bias = gate.HighLoadBias(n=40, median_bias=-0.2, load_min=12)
    assert gate.high_load_drift(bias, GateRules()) is None
    reason = gate.high_load_drift(bias, GateRules(high_load_bias_limit=0.1))
    assert reason is not None and reason.startswith("drift: live median bias -0.2000")
    assert gate.high_load_drift(bias, GateRules(high_load_bias_limit=0.25)) is None


@pytest.mark.parametrize(("newer", "cut"), [(40, False), (120, True)])
def test_a_drift_cuts_the_window_only_with_enough_newer_rows(newer: int, cut: bool) -> None:
    old = 400
    batch = sample(old + newer, np.random.default_rng(7))
    labels = batch.ttft
    params = TrainParams(n_estimators=10)
    first = train_target(
        "ttft",
        {k: v[:old] for k, v in batch.cols.items()},
        labels[:old],
        np.zeros(old, dtype=bool),
        params=params,
    )
    ids = np.arange(1, old + newer + 1, dtype=np.int64)
    # The router erred 2 % on the rows the active model trained on and 50 % since: drift.
    predicted = np.where(ids <= old, labels * 1.02, labels * 0.5)
    rows = WindowRows(batch.cols, labels, ids % 10 == 0, ids, predicted)
    active = gate.Active(first.model, max_id=old, held_out_mape=0.02)
    rules = GateRules(drift_cut_rows=100)
    round_ = gate.train_round(
        "ttft",
        rows,
        active,
        old,
        Shift(None),
        0.0,
        rules,
        ShiftRules(),
        kind="hybrid",
        objective="mean",
        quantile=0.9,
        params=params,
    )
    assert round_.decision.activate and round_.decision.reason.startswith("drift: live MAPE")
    # A candidate of the rows since (the cut) only when there are 100 of them; else the window.
    assert round_.from_id == (old if cut else 0)
    trained = (ids % 10 != 0) & (ids > old if cut else True)
    assert round_.result.n_train == int(trained.sum())
