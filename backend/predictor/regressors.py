"""Latency models behind one small interface: fit, predict, to_artifact, from_artifact.

Two kinds:

* ``"xgboost"``: a plain XGBoost regressor on raw milliseconds, upstream's approach. Trees predict
  piecewise constants, so nothing above the largest label seen in training: a prompt twice as
  long as any seen gets the TTFT of the longest one seen.
* ``"hybrid"`` (default): ``prediction = base(x) * exp(clip(trees(x), -m, m))``. ``base`` is a
  linear model in the physical cost drivers with non-negative coefficients (more work never
  predicts less latency), fitted by robust, relatively weighted NNLS. The trees fit the log of
  what the base leaves over, ``log(y / base)``, so in range they recover XGBoost's accuracy,
  while out of range they can only hold the edge's ratio (bounded by ``m``) and the base carries
  the trend.

For the quantile objective the base is still fitted for the centre and the trees fit the
``alpha`` quantile of the log-ratio; a quantile survives any monotone transform, so
``base * exp(q_alpha(log-ratio))`` is the ``alpha`` quantile of the latency.
"""

from __future__ import annotations

import dataclasses
import json
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Final, Literal, Self, cast

import numpy as np
import numpy.typing as npt
import xgboost as xgb

from backend.predictor.artifacts import (
    ArtifactError,
    CompiledTrees,
    booster_from_bytes,
    booster_to_bytes,
    decode_envelope,
    encode_envelope,
)
from backend.predictor.calibration import Calibration, row_load

Kind = Literal["hybrid", "xgboost"]
LossObjective = Literal["mean", "quantile"]
FloatArray = npt.NDArray[np.float32]
KINDS: Final[tuple[Kind, ...]] = ("hybrid", "xgboost")
OBJECTIVES: Final[tuple[LossObjective, ...]] = ("mean", "quantile")
ARTIFACT_FORMAT: Final = "headroom.latency-model"


@dataclasses.dataclass(frozen=True)
class TrainParams:
    """Booster settings (and, for the hybrid, its base fit). Defaults suit the hybrid's trees.

    The hybrid's trees only correct a ratio, so they are few and shallow: that keeps the
    two-target hot path for 100 rows well below 0.5 ms. ``nthread=0`` trains on every core; the
    default is 1 because OpenMP collapses when another process holds a core (measured 10-30x
    slower with 2 threads on a 2-core machine running one other busy process), and a window of
    100k rows trains on one core in about 0.5 s (hybrid) or 1.2 s (upstream-size XGBoost).
    """

    n_estimators: int = 60
    max_depth: int = 4
    learning_rate: float = 0.15
    subsample: float = 0.8
    colsample_bytree: float = 1.0
    min_child_weight: float = 5.0
    reg_lambda: float = 1.0
    reg_alpha: float = 0.0
    gamma: float = 0.0
    max_bin: int = 256
    nthread: int = 1
    seed: int = 42
    max_log_ratio: float = 1.4
    """Hybrid: the trees may scale the base by at most exp(+-1.4), about 4x either way."""
    robust_iterations: int = 3
    """Hybrid: Huber reweighting rounds of the base fit."""

    @classmethod
    def upstream(cls) -> TrainParams:
        """llm-d's training-server XGBoost settings (v0.9.0)."""
        return cls(
            n_estimators=200,
            max_depth=6,
            learning_rate=0.05,
            subsample=0.8,
            colsample_bytree=0.8,
            min_child_weight=5.0,
            reg_lambda=0.1,
            reg_alpha=0.01,
            gamma=0.2,
        )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainParams:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


def default_params(kind: Kind) -> TrainParams:
    return TrainParams.upstream() if kind == "xgboost" else TrainParams()


class LatencyModel(ABC):
    """A fitted-or-not latency regressor over a fixed, named feature matrix."""

    kind: ClassVar[Kind]

    def __init__(
        self,
        feature_names: Sequence[str],
        *,
        objective: LossObjective = "mean",
        quantile: float = 0.9,
        params: TrainParams | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        self.feature_names: tuple[str, ...] = tuple(feature_names)
        self.objective: LossObjective = objective
        self.quantile = float(quantile)
        self.params = params or default_params(self.kind)
        self._booster: xgb.Booster | None = None
        self._trees: CompiledTrees | None = None
        # Pod classes seen in training, in code order (see features.pod_class_codes).
        self.classes: tuple[str, ...] = ()
        # Per pod class, the prefill rate measured on the training window (TTFT models; see
        # features.measure_prefill_rates).
        self.prefill_rates: dict[str, float] = {}
        # A mean model's residual calibration: the served mean's correction and the spread
        # around it, per load band (set by training from live or held-out rows; see
        # backend/predictor/calibration.py). ``predict`` is the model alone.
        self.calibration: Calibration | None = None

    @property
    def fitted(self) -> bool:
        return self._trees is not None

    @abstractmethod
    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> Self: ...

    @abstractmethod
    def predict(self, X: npt.ArrayLike) -> FloatArray:
        """Latency in ms per row of ``X``, float32, never negative."""

    def predict_upper(self, X: npt.ArrayLike) -> FloatArray | None:
        """The calibrated upper quantile (e.g. p90) per row of ``X``; None without one.
        Relative to the model's own prediction: the band's correction times its spread."""
        if self.calibration is None:
            return None
        m = self._matrix(X)
        factor = self.calibration.factor(row_load(m, self.feature_names))
        return (self.predict(m) * factor).astype(np.float32)

    def tree_dump(self) -> list[dict[str, Any]]:
        """The booster's trees as XGBoost ``get_dump(dump_format="json")`` objects.

        For the hybrid these are the correction trees (their sum is ``log(latency / base)``), so
        they are for inspection and upstream's endpoint, not for predicting without the base.
        """
        return [json.loads(tree) for tree in self._require_booster().get_dump(dump_format="json")]

    def feature_importance(self) -> dict[str, float]:
        """Share of the trees' total split gain per feature (sums to 1; 0 when unused)."""
        gains = cast(
            dict[str, float], self._require_booster().get_score(importance_type="total_gain")
        )
        total = sum(gains.values())
        return {
            name: (gains.get(name, 0.0) / total if total else 0.0) for name in self.feature_names
        }

    def to_artifact(self, *, encoding: Literal["ubj", "json"] = "ubj") -> bytes:
        header = {
            "format": ARTIFACT_FORMAT,
            "kind": self.kind,
            "objective": self.objective,
            "quantile": self.quantile,
            "feature_names": list(self.feature_names),
            "params": dataclasses.asdict(self.params),
            "booster_encoding": encoding,
            "xgboost_version": xgb.__version__,
            "classes": list(self.classes),
            "prefill_rates": self.prefill_rates,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            **self._header_extra(),
        }
        return encode_envelope(header, booster_to_bytes(self._require_booster(), encoding))

    @classmethod
    def from_artifact(cls, data: bytes) -> LatencyModel:
        """Load any kind from an artifact (on a subclass, the kind must match)."""
        header, payload = decode_envelope(data)
        if header.get("format") != ARTIFACT_FORMAT:
            raise ArtifactError(f"not a latency model artifact: {header.get('format')!r}")
        classes: dict[str, type[LatencyModel]] = {"hybrid": HybridModel, "xgboost": XGBoostModel}
        target = classes.get(header.get("kind", ""))
        if target is None or not issubclass(target, cls):
            raise ArtifactError(f"artifact kind {header.get('kind')!r} is not a {cls.__name__}")
        model = target._empty(header)
        model.classes = tuple(header.get("classes", ()))
        model.prefill_rates = dict(header.get("prefill_rates", {}))
        calibration = header.get("calibration")
        model.calibration = Calibration.from_dict(calibration) if calibration else None
        booster = booster_from_bytes(payload)
        model._restore(header, booster)
        return model

    @classmethod
    def _empty(cls, header: dict[str, Any]) -> Self:
        return cls(
            header["feature_names"],
            objective=header["objective"],
            quantile=header["quantile"],
            params=TrainParams.from_dict(header.get("params", {})),
        )

    def _header_extra(self) -> dict[str, Any]:
        return {}

    def _restore(self, header: dict[str, Any], booster: xgb.Booster) -> None:
        self._set_booster(booster)

    def _set_booster(self, booster: xgb.Booster) -> None:
        booster.set_param({"nthread": 1})
        self._booster = booster
        self._trees = CompiledTrees.from_booster(booster, len(self.feature_names))

    def _require_booster(self) -> xgb.Booster:
        if self._booster is None:
            raise RuntimeError("model is not fitted")
        return self._booster

    def _require_trees(self) -> CompiledTrees:
        if self._trees is None:
            raise RuntimeError("model is not fitted")
        return self._trees

    def _matrix(self, X: npt.ArrayLike) -> FloatArray:
        matrix = np.asarray(X, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[1] != len(self.feature_names):
            raise ValueError(
                f"expected a (n, {len(self.feature_names)}) feature matrix, got {matrix.shape}"
            )
        return matrix

    def _train_booster(self, X: FloatArray, label: npt.NDArray[np.float32]) -> xgb.Booster:
        p = self.params
        settings: dict[str, Any] = {
            "tree_method": "hist",
            "max_depth": p.max_depth,
            "eta": p.learning_rate,
            "subsample": p.subsample,
            "colsample_bytree": p.colsample_bytree,
            "min_child_weight": p.min_child_weight,
            "lambda": p.reg_lambda,
            "alpha": p.reg_alpha,
            "gamma": p.gamma,
            "max_bin": p.max_bin,
            "nthread": p.nthread or os.cpu_count() or 1,
            "seed": p.seed,
        }
        if self.objective == "quantile":
            settings |= {"objective": "reg:quantileerror", "quantile_alpha": self.quantile}
        else:
            settings["objective"] = "reg:squarederror"
        data = xgb.QuantileDMatrix(
            X, label=label, feature_names=list(self.feature_names), max_bin=p.max_bin
        )
        return xgb.train(settings, data, num_boost_round=p.n_estimators)


def _labelled(model: LatencyModel, X: npt.ArrayLike, y: npt.ArrayLike) -> tuple[FloatArray, Any]:
    matrix = model._matrix(X)
    labels = np.asarray(y, dtype=np.float64).reshape(-1)
    if labels.shape[0] != matrix.shape[0]:
        raise ValueError(f"{matrix.shape[0]} feature rows but {labels.shape[0]} labels")
    if labels.size == 0:
        raise ValueError("cannot fit on zero rows")
    if not np.all(np.isfinite(labels) & (labels > 0)):
        raise ValueError("labels must be finite and > 0 (drop unlabelled rows first)")
    return matrix, labels


class XGBoostModel(LatencyModel):
    """Plain XGBoost on raw milliseconds (upstream's model); kept for comparison."""

    kind: ClassVar[Kind] = "xgboost"

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> Self:
        matrix, labels = _labelled(self, X, y)
        self._set_booster(self._train_booster(matrix, labels.astype(np.float32)))
        return self

    def predict(self, X: npt.ArrayLike) -> FloatArray:
        out = self._require_trees().margin(self._matrix(X))
        np.maximum(out, 0.0, out=out)
        return out


class HybridModel(LatencyModel):
    """Non-negative linear base on the cost drivers, times a bounded tree correction."""

    kind: ClassVar[Kind] = "hybrid"

    def __init__(
        self,
        feature_names: Sequence[str],
        *,
        base_features: Sequence[str] | None = None,
        objective: LossObjective = "mean",
        quantile: float = 0.9,
        params: TrainParams | None = None,
    ) -> None:
        super().__init__(feature_names, objective=objective, quantile=quantile, params=params)
        chosen = tuple(base_features) if base_features is not None else self.feature_names
        unknown = [name for name in chosen if name not in self.feature_names]
        if unknown:
            raise ValueError(f"base features not among the model's features: {unknown}")
        self.base_features: tuple[str, ...] = chosen
        self._base_index = np.array(
            [self.feature_names.index(name) for name in chosen], dtype=np.intp
        )
        self._intercept = 0.0
        self._coef: dict[str, float] = dict.fromkeys(chosen, 0.0)
        self._floor = 1e-3
        self._coef32 = np.zeros(len(self.feature_names), dtype=np.float32)

    def fit(self, X: npt.ArrayLike, y: npt.ArrayLike) -> Self:
        matrix, labels = _labelled(self, X, y)
        drivers = matrix[:, self._base_index].astype(np.float64)
        intercept, coef = fit_nonnegative(drivers, labels, self.params.robust_iterations)
        # Keeps the log-ratio finite where every driver is 0 and the intercept came out 0.
        floor = 0.05 * float(np.percentile(labels, 1))
        self._set_base(intercept, dict(zip(self.base_features, coef.tolist(), strict=True)), floor)
        bound = self.params.max_log_ratio
        ratio = np.clip(np.log(labels / self._base(matrix)), -bound, bound)
        self._set_booster(self._train_booster(matrix, ratio.astype(np.float32)))
        return self

    def predict(self, X: npt.ArrayLike) -> FloatArray:
        matrix = self._matrix(X)
        correction = self._require_trees().margin(matrix)
        bound = self.params.max_log_ratio
        np.clip(correction, -bound, bound, out=correction)
        np.exp(correction, out=correction)
        out = self._base(matrix)
        out *= correction
        return out

    def coefficients(self) -> dict[str, float]:
        """The base's intercept (ms) and per-feature slopes (ms per unit of the feature)."""
        return {"intercept": self._intercept, **self._coef}

    def base_predict(self, X: npt.ArrayLike) -> FloatArray:
        """The linear base alone: the trend that predictions follow outside the training range."""
        return self._base(self._matrix(X))

    def _base(self, X: FloatArray) -> FloatArray:
        out: FloatArray = X @ self._coef32
        out += np.float32(self._intercept)
        np.maximum(out, np.float32(self._floor), out=out)
        return out

    def _set_base(self, intercept: float, coef: dict[str, float], floor: float) -> None:
        self._intercept, self._coef, self._floor = float(intercept), coef, float(floor)
        self._coef32 = np.zeros(len(self.feature_names), dtype=np.float32)
        for name, value in coef.items():
            self._coef32[self.feature_names.index(name)] = value

    def _header_extra(self) -> dict[str, Any]:
        return {
            "base": {
                "intercept": self._intercept,
                "coefficients": self._coef,
                "floor": self._floor,
            }
        }

    @classmethod
    def _empty(cls, header: dict[str, Any]) -> Self:
        return cls(
            header["feature_names"],
            base_features=list(header["base"]["coefficients"]),
            objective=header["objective"],
            quantile=header["quantile"],
            params=TrainParams.from_dict(header.get("params", {})),
        )

    def _restore(self, header: dict[str, Any], booster: xgb.Booster) -> None:
        base = header["base"]
        self._set_base(base["intercept"], dict(base["coefficients"]), base["floor"])
        self._set_booster(booster)


def make_model(
    kind: Kind,
    feature_names: Sequence[str],
    *,
    base_features: Sequence[str] | None = None,
    objective: LossObjective = "mean",
    quantile: float = 0.9,
    params: TrainParams | None = None,
) -> LatencyModel:
    if kind == "hybrid":
        return HybridModel(
            feature_names,
            base_features=base_features,
            objective=objective,
            quantile=quantile,
            params=params,
        )
    if kind == "xgboost":
        return XGBoostModel(feature_names, objective=objective, quantile=quantile, params=params)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def load_model(data: bytes) -> LatencyModel:
    return LatencyModel.from_artifact(data)


def fit_nonnegative(
    drivers: npt.NDArray[np.float64], y: npt.NDArray[np.float64], iterations: int = 3
) -> tuple[float, npt.NDArray[np.float64]]:
    """Intercept and slopes, all >= 0, minimising robust *relative* squared error.

    Iteratively reweighted NNLS: weights ``1/f**2`` make each row's error relative to its own
    latency (what MAPE scores), taken from the current fit rather than the noisy label so that
    large noisy labels are not systematically down-weighted; a Huber factor on the relative
    residual keeps stragglers (GC pauses, preemptions) from bending the trend.
    """
    design = np.column_stack([np.ones(len(y)), drivers])
    fitted = y
    huber = np.ones(len(y))
    beta = np.zeros(design.shape[1])
    for _ in range(max(iterations, 0) + 1):
        weights = huber / np.square(np.maximum(fitted, 1e-9))
        weighted = design * weights[:, None]
        beta = _nnls_gram(weighted.T @ design, weighted.T @ y)
        fitted = np.maximum(design @ beta, 1e-3 * float(np.median(y)))
        residual = (y - fitted) / fitted
        spread = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
        cutoff = 1.345 * max(spread, 1e-6)
        huber = np.minimum(1.0, cutoff / np.maximum(np.abs(residual), 1e-12))
    return float(beta[0]), beta[1:]


def _nnls_gram(gram: npt.NDArray[np.float64], rhs: npt.NDArray[np.float64]) -> Any:
    """Lawson-Hanson NNLS on the normal equations: argmin x'Gx - 2h'x subject to x >= 0."""
    k = rhs.shape[0]
    scale = np.sqrt(np.diag(gram))
    live = scale > 0
    scale[~live] = 1.0
    G = gram / np.outer(scale, scale) + 1e-10 * np.eye(k)
    h = rhs / scale
    x = np.zeros(k)
    passive = np.zeros(k, dtype=bool)
    for _ in range(3 * k + 3):
        gradient = h - G @ x
        candidates = live & ~passive & (gradient > 1e-12)
        if not candidates.any():
            break
        passive[np.argmax(np.where(candidates, gradient, -np.inf))] = True
        while True:
            free = np.flatnonzero(passive)
            trial = np.zeros(k)
            trial[free] = np.linalg.solve(G[np.ix_(free, free)], h[free])
            if np.all(trial[free] > 0):
                x = trial
                break
            # Walk from x towards the trial point until the first coordinate hits zero.
            blocked = free[trial[free] <= 0]
            drop = x[blocked] - trial[blocked]
            step = float(
                np.min(np.divide(x[blocked], drop, out=np.zeros_like(drop), where=drop > 0))
            )
            x = x + step * (trial - x)
            passive &= x > 1e-15
            x[~passive] = 0.0
            if not passive.any():
                break
    return x / scale
