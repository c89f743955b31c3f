"""The promotion gate: should a freshly trained candidate replace the active model?

One definition, pure (numpy only), shared by the service's trainer (`backend/registry`) and the
simulator's online predictor (`backend/sim/online.py`). The caller picks the rows; this module
only judges. The rules, in the order they are applied (docs/design.md, "The promotion gate"):

1. A candidate whose held-out error is not finite is never activated.
2. No comparable active model: the candidate wins.
3. Fewer than `min_test` held-out rows: the gate cannot judge, the newest model wins.
4. Drift: the active model's live error (the `predicted_*_ms` the router used, on rows newer
   than its training) is above `drift_factor` times its own held-out error, above that
   multiple of the router's live error on older rows when there are enough, and above the
   worst of their runs of as many rows: the candidate replaces it regardless of the comparison.
5. Otherwise both are scored on the same held-out rows (the caller passes the newest ones) and
   the candidate wins unless it is worse by more than `tolerance`.

The persistence rule against floods (`Shift`, `outlier_share`) is decided before the gate: rows
far outside what the active model predicts are kept out of training until their shift has held
for `hold_s` seconds over at least two training rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from backend.predictor.calibration import Calibration, LiveRows, calibrate
from backend.predictor.evaluation import evaluate
from backend.predictor.features import Target
from backend.predictor.regressors import Kind, LatencyModel, LossObjective, TrainParams
from backend.predictor.rows import WindowRows
from backend.predictor.training import TrainResult, predict_columns, train_target
from backend.settings import TrainingSettings

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class GateRules:
    tolerance: float = 0.1
    """A candidate may be this much worse than the active model and still replace it."""
    min_test: int = 10
    """Below this many held-out rows the gate cannot judge and the newest model wins."""
    quantile: float | None = None
    """Quantile objective: score by pinball loss at this quantile (MAPE would punish a p90 model
    for being above most labels, which is its job)."""
    drift_factor: float = 2.0
    """Live error above this multiple of the active model's held-out error is drift."""
    high_load_bias_limit: float | None = None
    """Drift also when the live median bias in the top load decile (`high_load_bias`) exceeds
    this in absolute value (a fraction; None: off). Near saturation the predictor is optimistic
    first, where admission and saturation detection need it most."""
    drift_cut_rows: int = 100
    """A drift trains the candidate on the rows since the active model's training only when
    there are at least this many: a model of a few rows is no model (a load step in the
    autoscaling loop drifted twice in a minute and routed on a model of 15 rows). With fewer,
    the drift still replaces the active model, by a candidate of the whole window."""

    @classmethod
    def from_settings(cls, t: TrainingSettings) -> GateRules:
        quantile = t.quantile if t.objective == "quantile" else None
        return cls(
            t.gate_tolerance,
            t.gate_min_test,
            quantile,
            t.gate_drift_factor,
            t.gate_high_load_bias_limit,
            t.gate_drift_cut_rows,
        )


@dataclass(frozen=True)
class GateDecision:
    activate: bool
    reason: str


@dataclass(frozen=True)
class LiveError:
    """The active model's error in service: what the router predicted against what happened."""

    n: int
    mape: float


def score(labels: npt.ArrayLike, predicted: npt.ArrayLike, quantile: float | None) -> float:
    """The gate's error figure: MAPE, or the pinball loss for a quantile model."""
    metrics = evaluate(labels, predicted, quantile=quantile)
    if quantile is None:
        return metrics.mape
    assert metrics.quantile_loss is not None
    return metrics.quantile_loss


def _live_ape(labels: npt.ArrayLike, predicted: npt.ArrayLike) -> FloatArray:
    """Absolute percentage errors of the router's own predictions, in the rows' order; rows
    without a prediction or a label (NaN, <= 0) are skipped."""
    true = np.asarray(labels, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    keep = np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    return np.asarray(np.abs(pred[keep] - true[keep]) / true[keep], dtype=np.float64)


def live_error(labels: npt.ArrayLike, predicted: npt.ArrayLike) -> LiveError | None:
    """MAPE of the router's own predictions; rows without a prediction (NaN, <= 0) are skipped."""
    ape = _live_ape(labels, predicted)
    if not ape.size:
        return None
    return LiveError(int(ape.size), float(np.mean(ape)))


def worst_run(labels: npt.ArrayLike, predicted: npt.ArrayLike, size: int) -> float | None:
    """The highest live MAPE of any run of `size` consecutive rows (rows in arrival order, cut
    from the newest end; rows without a prediction skipped). None without one full run."""
    ape = _live_ape(labels, predicted)
    runs = ape.size // size if size > 0 else 0
    if runs == 0:
        return None
    return float(ape[ape.size - runs * size :].reshape(runs, size).mean(axis=1).max())


@dataclass(frozen=True)
class HighLoadBias:
    """The live median bias of the predictions made at the highest loads."""

    n: int
    median_bias: float
    """Signed median of (pred - true) / true on the top rows: negative is optimistic."""
    load_min: float
    """The lowest load among the rows scored."""


def high_load_bias(
    loads: npt.ArrayLike,
    actual: npt.ArrayLike,
    predicted: npt.ArrayLike,
    top_share: float = 0.1,
    min_rows: int = 10,
) -> HighLoadBias | None:
    """Median bias of the predictions in the top ``top_share`` of rows by load (the top load
    decile by default), e.g. loads = requests running + waiting on the pod at dispatch.

    Rows without a usable prediction or label (NaN, <= 0) are skipped. Rows are ranked by load
    with ties broken by order (the newest rows at the threshold load: the gate judges the
    present; the simulator's per-decile report breaks them at random), so a load shared by
    many rows still yields a full top group. None below ``min_rows`` scored rows. Pure; shared
    by the gate's drift rule, the simulator's reports and the per-version figures served."""
    if not 0.0 < top_share <= 1.0:
        raise ValueError("top_share must be in (0, 1]")
    load = np.asarray(loads, dtype=np.float64).reshape(-1)
    true = np.asarray(actual, dtype=np.float64).reshape(-1)
    pred = np.asarray(predicted, dtype=np.float64).reshape(-1)
    if not load.shape == true.shape == pred.shape:
        raise ValueError("loads, actual and predicted must have the same length")
    keep = np.isfinite(load) & np.isfinite(pred) & (pred > 0) & np.isfinite(true) & (true > 0)
    load, true, pred = load[keep], true[keep], pred[keep]
    top = math.ceil(top_share * load.size)
    if top < min_rows:
        return None
    rows = np.argsort(load, kind="stable")[-top:]
    rel = (pred[rows] - true[rows]) / true[rows]
    return HighLoadBias(int(top), float(np.median(rel)), float(load[rows].min()))


def high_load_drift(bias: HighLoadBias | None, rules: GateRules) -> str | None:
    """Drift when the top load decile's live median bias is beyond the rules' limit."""
    limit = rules.high_load_bias_limit
    if bias is None or limit is None or abs(bias.median_bias) <= limit:
        return None
    return (
        f"drift: live median bias {bias.median_bias:+.4f} on the {bias.n} highest-load rows "
        f"(load >= {bias.load_min:g}) beyond {limit:g}"
    )


def drift(
    live: LiveError | None,
    active_held_out_mape: float | None,
    rules: GateRules,
    earlier: LiveError | None = None,
    earlier_worst: float | None = None,
) -> str | None:
    """Rule 4: the reason, when the active model's live error says the traffic has moved on.

    `earlier` is the router's live error on older rows, routed by the models before the active
    one. Routed traffic carries error that held-out rows do not (the winner's curse of routing
    on predictions, later arrivals), so twice the held-out error alone fires without any change
    and its cut of the window costs accuracy. With `min_test` earlier rows, drift must also
    exceed `drift_factor` times that usual live error: a yardstick a replacement does not move
    (the older rows keep the predictions they were routed with). `earlier_worst` is the highest
    live error of any earlier run of `live.n` consecutive rows (`worst_run`): one round's few
    rows in a burst double the usual error, and a burst as bad seen before was no change."""
    if live is None or active_held_out_mape is None or live.n < rules.min_test:
        return None
    if live.mape <= rules.drift_factor * max(active_held_out_mape, 1e-9):
        return None
    usual = ""
    if earlier is not None and earlier.n >= rules.min_test:
        if live.mape <= rules.drift_factor * earlier.mape:
            return None
        usual = f" and the earlier live {earlier.mape:.4f} on {earlier.n} rows"
    if earlier_worst is not None:
        if live.mape <= earlier_worst:
            return None
        usual += f", above the worst earlier run of {live.n} rows ({earlier_worst:.4f})"
    return (
        f"drift: live MAPE {live.mape:.4f} on {live.n} rows > {rules.drift_factor:g} x "
        f"the active model's held-out {active_held_out_mape:.4f}{usual}"
    )


@dataclass(frozen=True)
class RoutedError:
    """The router's live error around the active model's training: on the rows since (what it
    is serving now), on the older ones (the usual live error of routed traffic) and the worst
    run of the older ones as long as the newer: `drift`'s yardsticks. The trainer and the
    console's warning both read drift through it (the trainer's older rows leave the flood
    rule's outliers out; the console's are the newest samples its page reads)."""

    live: LiveError | None
    earlier: LiveError | None
    earlier_worst: float | None

    def drift(self, active_held_out_mape: float | None, rules: GateRules) -> str | None:
        return drift(self.live, active_held_out_mape, rules, self.earlier, self.earlier_worst)


def routed_error(
    labels: FloatArray,
    predicted: FloatArray,
    ids: npt.NDArray[np.int64],
    since: npt.NDArray[np.bool_],
    older: npt.NDArray[np.bool_],
) -> RoutedError:
    """`RoutedError` of the ``since`` rows against the ``older`` ones (any order: ``ids`` give
    their age)."""
    live = live_error(labels[since], predicted[since])
    by_age = np.flatnonzero(older)[np.argsort(ids[older], kind="stable")]
    return RoutedError(
        live,
        live_error(labels[older], predicted[older]),
        worst_run(labels[by_age], predicted[by_age], live.n) if live else None,
    )


def judge(
    candidate_held_out_error: float | None,
    labels: FloatArray,
    candidate_pred: FloatArray,
    active_pred: FloatArray | None,
    rules: GateRules,
    *,
    drifted: str | None = None,
    rows_note: str = "",
) -> GateDecision:
    """Decide on a candidate.

    `labels`, `candidate_pred` and `active_pred` are the scoring rows (held-out, chosen by the
    caller, e.g. the newest ones); `candidate_held_out_error` is the candidate's error on its
    whole held-out set (None when it had none); `drifted` is rule 4's reason when it fired.
    `rows_note` says which rows were scored, for the recorded reason.
    """
    if candidate_held_out_error is not None and not math.isfinite(candidate_held_out_error):
        return GateDecision(False, "held-out error is not finite")
    if active_pred is None:
        return GateDecision(True, "first model of this target (or none comparable)")
    if drifted is not None:
        return GateDecision(True, drifted)
    if candidate_held_out_error is None or labels.size < rules.min_test:
        return GateDecision(
            True, f"fewer than {rules.min_test} held-out rows: the newest model wins"
        )
    mine = score(labels, candidate_pred, rules.quantile)
    theirs = score(labels, active_pred, rules.quantile)
    if not math.isfinite(mine):
        return GateDecision(False, "held-out error is not finite")
    name = "pinball loss" if rules.quantile is not None else "MAPE"
    verdict = f"held-out {name} {mine:.4f} vs active {theirs:.4f} on {labels.size} {rows_note}rows"
    if mine <= theirs * (1 + rules.tolerance):
        return GateDecision(True, verdict)
    return GateDecision(False, f"{verdict}: worse by more than {rules.tolerance:.0%}")


def newest(ids: npt.NDArray[np.int64], since_id: int, min_rows: int) -> npt.NDArray[np.bool_]:
    """The rows the gate scores on: those newer than `since_id` (the active model's training),
    when there are at least `min_rows`; else every row. Scoring on a mix dominated by old rows
    would keep a model of the past after a change of regime."""
    fresh = ids > since_id
    if int(fresh.sum()) >= min_rows:
        return fresh
    return np.ones(ids.shape, dtype=np.bool_)


# -- the persistence rule -------------------------------------------------------------------


@dataclass(frozen=True)
class ShiftRules:
    outlier_factor: float = 3.0
    """A row is an outlier when its latency is more than this factor above or below what the
    active model predicts for it."""
    majority: float = 0.5
    """A round whose new rows are at least this share outliers continues (or starts) a shift."""
    hold_s: float = 120.0
    """A shift must have held this long (and over two rounds at least) before its rows train."""

    @classmethod
    def from_settings(cls, t: TrainingSettings) -> ShiftRules:
        return cls(outlier_factor=t.outlier_factor, hold_s=t.shift_hold_s)


@dataclass(frozen=True)
class Shift:
    """What the previous training round saw: when the current shift began (None: no shift)."""

    since: float | None
    rounds: int = 0
    from_id: int = 0
    """The newest row id before the shift began: once established, older rows stop training."""


def outliers(labels: FloatArray, active_pred: FloatArray, factor: float) -> npt.NDArray[np.bool_]:
    """Rows whose label is more than `factor` times above or below the active prediction."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.abs(np.log(labels / np.maximum(active_pred, 1e-9)))
    return np.asarray(~(ratio <= math.log(factor)), dtype=np.bool_)


def next_shift(
    previous: Shift,
    new_outlier_share: float | None,
    now: float,
    rules: ShiftRules,
    before_id: int = 0,
) -> Shift:
    """Carry the shift state into this round. A round without new rows changes nothing; a round
    whose new rows are mostly ordinary ends the shift (a burst has passed)."""
    if new_outlier_share is None:
        return previous
    if new_outlier_share < rules.majority:
        return Shift(None, 0)
    if previous.since is None:
        return Shift(now, 1, before_id)
    return Shift(previous.since, previous.rounds + 1, previous.from_id)


def established(shift: Shift, now: float, rules: ShiftRules) -> bool:
    """Has the shift persisted long enough to be a regime, not a burst?"""
    return shift.since is not None and shift.rounds >= 2 and now - shift.since >= rules.hold_s


# -- one training round, as the service and the simulator both run it ------------------------


@dataclass(frozen=True)
class Active:
    model: LatencyModel
    max_id: int
    """The newest row id it was trained on."""
    held_out_mape: float | None
    from_id: int = 0
    """Rows up to this id predate a change of regime (drift or an established shift) and no
    longer train."""


@dataclass(frozen=True)
class Round:
    result: TrainResult
    decision: GateDecision
    shift: Shift
    n_outliers: int
    """Window rows far outside the active model's prediction (kept, and counted)."""
    from_id: int = 0
    """The candidate trained only on rows newer than this (see `Active.from_id`)."""


def train_round(
    target: Target,
    rows: WindowRows,
    active: Active | None,
    last_trained_max_id: int,
    previous: Shift,
    now: float,
    rules: GateRules,
    shift_rules: ShiftRules,
    *,
    kind: Kind,
    objective: LossObjective,
    quantile: float,
    params: TrainParams | None = None,
) -> Round:
    """Train a candidate on the window and judge it against the active model.

    Outlier rows (relative to the active model) train only once their shift is established;
    until then they are counted and kept, and the candidate learns from the rest. Raises
    ValueError when no usable training row is left (the caller stores nothing then).
    """
    labels = rows.labels
    if active is None:
        result = _fit(
            target, rows, np.ones(labels.shape, dtype=np.bool_), kind, objective, quantile, params
        )
        error = result.metrics.mape if result.metrics else None
        decision = judge(error, labels[:0], labels[:0], None, rules)
        return Round(result, decision, Shift(None), 0)
    active_all = np.asarray(predict_columns(active.model, target, rows.cols), dtype=np.float64)
    out = outliers(labels, active_all, shift_rules.outlier_factor) & (labels > 0)
    n_out = int(out.sum())
    new = rows.ids > last_trained_max_id
    share = float(out[new].mean()) if new.any() else None
    shift = next_shift(previous, share, now, shift_rules, last_trained_max_id)
    from_id, held_back, drifted = active.from_id, "", None
    if established(shift, now, shift_rules):
        # A regime, not a burst: the rows since it began train, outliers included.
        from_id = max(from_id, shift.from_id)
        use = rows.ids > from_id
        held_s = now - (shift.since or now)
        drifted = (
            f"shift held {held_s:.0f} s over {shift.rounds} rounds ({n_out} outlier rows): "
            "a new regime"
        )
    else:
        use = (rows.ids > from_id) & ~out
        if n_out:
            held_back = (
                f"; {n_out} outlier rows kept out of training until their shift has held "
                f"{shift_rules.hold_s:g} s over 2 rounds"
            )
        if rows.predicted is not None:
            since = use & (rows.ids > active.max_id)
            # Every older row, whatever regime: a cut of the window must not move the yardstick.
            older = ~out & (rows.ids <= active.max_id)
            routed = routed_error(labels, rows.predicted, rows.ids, since, older)
            drifted = routed.drift(active.held_out_mape, rules) or high_load_drift(
                high_load_bias(
                    np.asarray(rows.cols["num_request_waiting"], dtype=np.float64)[since]
                    + np.asarray(rows.cols["num_request_running"], dtype=np.float64)[since],
                    labels[since],
                    rows.predicted[since],
                    min_rows=rules.min_test,
                ),
                rules,
            )
            if drifted is not None and int(since.sum()) >= max(
                rules.min_test, rules.drift_cut_rows
            ):
                # The rows before the active model's training no longer describe the pods.
                from_id = active.max_id
                use &= rows.ids > from_id
    result = _fit(target, rows, use, kind, objective, quantile, params)
    if objective == "mean" and rows.predicted is not None:
        # Every row of the regime, outliers included: they stay out of training (and out of the
        # mean's correction) so that a burst does not bend the trees before it is known to last,
        # but they are what the pods did to requests routed by these predictions. Left out of the
        # spread too, the p90 lost its upper tail: the slow TPOTs more than 3x their prediction,
        # the ones that miss SLOs near saturation.
        _calibrate_live(target, result.model, rows, rows.ids > from_id, use, active_all)
    scored = use & rows.is_test & (labels > 0)
    fresh = newest(rows.ids[scored], active.max_id, rules.min_test)
    note = "newest " if not fresh.all() else ""
    mask = np.flatnonzero(scored)[fresh]
    if held_back and drifted is None and mask.size < rules.min_test:
        # Most of the window is outliers: a candidate of the few ordinary rows is no evidence.
        reason = f"fewer than {rules.min_test} ordinary held-out rows to judge by{held_back}"
        return Round(result, GateDecision(False, reason), shift, n_out, from_id)
    held = {name: np.asarray(col)[mask] for name, col in rows.cols.items()}
    decision = judge(
        result.metrics.mape if result.metrics else None,
        labels[mask],
        np.asarray(predict_columns(result.model, target, held), dtype=np.float64),
        active_all[mask],
        rules,
        drifted=drifted,
        rows_note=note,
    )
    if held_back:
        decision = GateDecision(decision.activate, decision.reason + held_back)
    return Round(result, decision, shift, n_out, from_id)


def served_factors(
    ids: npt.NDArray[np.int64],
    load: npt.ArrayLike,
    served_by: list[tuple[int, Calibration | None]],
) -> FloatArray:
    """The correction each row's prediction was served with. ``served_by`` lists, oldest first,
    each version that was activated as (the newest row id when it was, its calibration): a row
    newer than that id and not newer than the next one's was routed by it."""
    factor = np.ones(ids.shape, dtype=np.float64)
    if not served_by:
        return factor
    starts = np.asarray([start for start, _ in served_by], dtype=np.int64)
    version = np.searchsorted(starts, ids, side="left") - 1
    lo = np.asarray(load, dtype=np.float64)
    for k, (_, cal) in enumerate(served_by):
        rows = version == k
        if cal is not None and rows.any():
            factor[rows] = cal.mean_factor(lo[rows])
    return factor


def _calibrate_live(
    target: Target,
    model: LatencyModel,
    rows: WindowRows,
    regime: npt.NDArray[np.bool_],
    trained: npt.NDArray[np.bool_],
    active_pred: FloatArray,
) -> None:
    """Replace the candidate's held-out calibration by one from the live rows of the current
    regime, when enough were routed by a prediction: the correction from those it trained on,
    the spread from all of them (held-back outliers included). The ratio fitted is each row's
    actual latency over the model's own prediction of it: the served one with its correction
    undone when ``rows.served_factor`` says which, else the active version's prediction of the
    row (backend/predictor/calibration.py)."""
    assert rows.predicted is not None
    order = np.argsort(rows.ids[regime], kind="stable")  # newest last: ``calibrate`` keeps the tail
    pick = np.flatnonzero(regime)[order]
    load = (
        np.asarray(rows.cols["num_request_running"], dtype=np.float64)
        + np.asarray(rows.cols["num_request_waiting"], dtype=np.float64)
    )[pick]
    served = rows.predicted[pick]
    routed = np.isfinite(served) & (served > 0)
    factor = rows.served_factor
    raw = served / factor[pick] if factor is not None else active_pred[pick]
    # What the candidate already learned of the serving versions' error, on the rows it did not
    # train on: on its own training rows it fits part of the winner's curse too.
    held = np.flatnonzero(rows.is_test[pick])
    moved = np.full(pick.size, np.nan)
    if held.size:
        own = predict_columns(
            model, target, {k: np.asarray(v)[pick[held]] for k, v in rows.cols.items()}
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            moved[held] = np.asarray(own, dtype=np.float64) / raw[held]
    live = LiveRows(
        load,
        rows.labels[pick],
        np.where(routed, raw, np.nan),
        None if factor is not None else served,
        trained[pick],
        moved,
    )
    fitted = calibrate(None, live)
    if fitted is not None:
        model.calibration = fitted


def _fit(
    target: Target,
    rows: WindowRows,
    use: npt.NDArray[np.bool_],
    kind: Kind,
    objective: LossObjective,
    quantile: float,
    params: TrainParams | None,
) -> TrainResult:
    return train_target(
        target,
        {name: np.asarray(col)[use] for name, col in rows.cols.items()},
        rows.labels[use],
        rows.is_test[use],
        kind=kind,
        objective=objective,
        quantile=quantile,
        params=params,
    )
