"""KV-cache transfer time between a prefill and a decode pod.

Model: ``transfer_ms = latency(distance) + kv_bytes / bandwidth(distance)``, with
``kv_bytes = uncached tokens * bytes per KV token``. The uncached tokens are those the *decode*
pod lacks: with vLLM's NIXL connector the decode pod pulls only the blocks its own prefix cache
does not hold. ``distance`` is the finest topology level the two pods share.

Upstream has no such model (a topology scorer adds fixed 1.0 / 0.2 / 0.05 / 0.02 bonuses); here
the constants are configurable and ``TransferModel`` learns them per distance from observed
transfers with an online least-squares fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from backend.scheduling.types import (
    DISTANCES,
    Candidate,
    Distance,
    FloatArray,
    Topology,
    TransferConfig,
)

IntArray = npt.NDArray[np.intp]
_LEVELS: Final = ("host", "rack", "zone", "region")


def distance(a: Topology | None, b: Topology | None, default: Distance = "same_zone") -> Distance:
    """The finest level both pods are known to share.

    Unknown levels are skipped (pods in one known rack are at most "same_rack" apart even if
    their hosts are unknown). Without any shared level the answer is "cross_region" when the
    regions are known to differ, else ``default`` but never closer than a level known to differ.
    """
    codes = _topology_codes([a, b])
    return DISTANCES[
        int(_distance_index(codes[:, :1], codes[:, 1:], DISTANCES.index(default))[0, 0])
    ]


def _topology_codes(topologies: Sequence[Topology | None]) -> IntArray:
    """(levels, pods) integer codes per topology level, -1 for unknown."""
    codes = np.full((len(_LEVELS), len(topologies)), -1, dtype=np.intp)
    for level, attr in enumerate(_LEVELS):
        seen: dict[str, int] = {}
        for j, topo in enumerate(topologies):
            value = None if topo is None else getattr(topo, attr)
            if value is not None:
                codes[level, j] = seen.setdefault(value, len(seen))
    return codes


def _distance_index(p_codes: IntArray, d_codes: IntArray, default: int) -> IntArray:
    """Distance index (into DISTANCES) for every (prefill, decode) pair, vectorised."""
    shape = (p_codes.shape[1], d_codes.shape[1])
    result = np.full(shape, -1, dtype=np.intp)
    floor = np.zeros(shape, dtype=np.intp)
    for level in range(len(_LEVELS)):
        p, d = p_codes[level][:, None], d_codes[level][None, :]
        known = (p >= 0) & (d >= 0)
        undecided = result < 0
        result[undecided & known & (p == d)] = level
        floor[undecided & known & (p != d)] = level + 1
    undecided = result < 0
    result[undecided] = np.maximum(default, floor[undecided])
    return result


def kv_transfer_bytes(uncached_tokens: float, config: TransferConfig) -> int:
    """Bytes the decode pod pulls for ``uncached_tokens`` prompt tokens it does not hold."""
    return round(max(0.0, uncached_tokens) * config.kv_bytes_per_token)


@dataclass(slots=True)
class _Fit:
    """Exponentially weighted running moments of (bytes, ms) for one distance (Welford)."""

    weight: float = 0.0
    count: int = 0
    mean_x: float = 0.0
    mean_y: float = 0.0
    cxx: float = 0.0
    cxy: float = 0.0


@dataclass(slots=True)
class TransferModel:
    """Per-distance fit of ``ms = latency + bytes / bandwidth`` from observed transfers.

    Idea: weighted least squares over running moments, O(1) per sample and per prediction; older
    samples decay by ``forgetting`` per new sample of the same distance so a re-cabled or
    congested fabric is relearned. Until a distance has ``min_samples`` samples spanning more than
    one transfer size, or when the fit is not physical (bandwidth <= 0), it answers from the
    configured constants. A negative fitted latency is clamped to 0 and the slope refitted
    through the origin.
    """

    config: TransferConfig = field(default_factory=TransferConfig)
    min_samples: int = 8
    forgetting: float = 0.999
    _fits: dict[str, _Fit] = field(default_factory=dict)

    def observe(self, kv_bytes: float, distance: Distance, transfer_ms: float) -> None:
        if distance not in DISTANCES:
            raise ValueError(f"unknown distance {distance!r}")
        if not (kv_bytes >= 0 and transfer_ms >= 0):
            raise ValueError("kv_bytes and transfer_ms must be >= 0")
        fit = self._fits.setdefault(distance, _Fit())
        fit.weight *= self.forgetting
        fit.cxx *= self.forgetting
        fit.cxy *= self.forgetting
        fit.weight += 1.0
        fit.count += 1
        dx = kv_bytes - fit.mean_x
        fit.mean_x += dx / fit.weight
        fit.mean_y += (transfer_ms - fit.mean_y) / fit.weight
        fit.cxx += dx * (kv_bytes - fit.mean_x)
        fit.cxy += dx * (transfer_ms - fit.mean_y)

    def coefficients(self, distance: Distance) -> tuple[float, float, bool]:
        """(latency_ms, ms_per_byte, learned) for one distance."""
        fallback = (
            self.config.latency_ms(distance),
            1.0 / (self.config.bandwidth_gbps(distance) * 1e6),  # GB/s -> bytes per ms
            False,
        )
        fit = self._fits.get(distance)
        # A slope needs transfers of different sizes; the relative threshold absorbs the rounding
        # noise that identical sizes leave in the running moments.
        if (
            fit is None
            or fit.count < self.min_samples
            or fit.cxx / fit.weight <= (1e-6 * fit.mean_x) ** 2
        ):
            return fallback
        slope = fit.cxy / fit.cxx
        intercept = fit.mean_y - slope * fit.mean_x
        if intercept < 0:
            # Through the origin: slope = sum(w x y) / sum(w x^2) from the same moments.
            sxx = fit.cxx + fit.weight * fit.mean_x**2
            sxy = fit.cxy + fit.weight * fit.mean_x * fit.mean_y
            intercept, slope = 0.0, sxy / sxx
        if not slope > 0:
            return fallback
        return intercept, slope, True

    def bandwidth_gbps(self, distance: Distance) -> float:
        return 1.0 / (self.coefficients(distance)[1] * 1e6)

    def predict_ms(self, kv_bytes: float, distance: Distance) -> float:
        latency, per_byte, _ = self.coefficients(distance)
        return latency + per_byte * kv_bytes

    def predict_matrix(self, kv_bytes: FloatArray, distance_idx: IntArray) -> FloatArray:
        """Vectorised ``predict_ms`` over arrays of equal shape (bytes, index into DISTANCES)."""
        coef = np.array([self.coefficients(d)[:2] for d in DISTANCES], dtype=np.float64)
        result: FloatArray = coef[distance_idx, 0] + coef[distance_idx, 1] * kv_bytes
        return result

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": {name: getattr(self.config, name) for name in self.config.__slots__},
            "min_samples": self.min_samples,
            "forgetting": self.forgetting,
            "fits": {
                d: {name: getattr(fit, name) for name in fit.__slots__}
                for d, fit in self._fits.items()
            },
            # Derived, for people reading the JSON; ignored by from_dict.
            "effective": {
                d: dict(
                    zip(("latency_ms", "ms_per_byte", "learned"), self.coefficients(d), strict=True)
                )
                for d in DISTANCES
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransferModel:
        model = cls(
            config=TransferConfig(**data.get("config", {})),
            min_samples=int(data.get("min_samples", 8)),
            forgetting=float(data.get("forgetting", 0.999)),
        )
        for d, fit in data.get("fits", {}).items():
            if d not in DISTANCES:
                raise ValueError(f"unknown distance {d!r}")
            model._fits[d] = _Fit(**fit)
        return model


@dataclass(frozen=True, slots=True)
class PairCosts:
    """Transfer estimates for every (prefill, decode) pair: rows prefill, columns decode."""

    distance_idx: IntArray
    kv_bytes: FloatArray  # per decode pod (what it must pull), broadcast over rows
    transfer_ms: FloatArray

    def distance(self, i: int, j: int) -> Distance:
        return DISTANCES[int(self.distance_idx[i, j])]


def pair_costs(
    prefills: Sequence[Candidate],
    decodes: Sequence[Candidate],
    prompt_tokens: int,
    model: TransferModel,
) -> PairCosts:
    codes = _topology_codes([c.topology for c in (*prefills, *decodes)])
    default = DISTANCES.index(model.config.unknown_distance)
    idx = _distance_index(codes[:, : len(prefills)], codes[:, len(prefills) :], default)
    prefix = np.fromiter((c.prefix_cache_score for c in decodes), np.float64, len(decodes))
    uncached = np.maximum(0.0, prompt_tokens * (1.0 - np.clip(prefix, 0.0, 1.0)))
    per_decode = np.round(uncached * model.config.kv_bytes_per_token)
    bytes_matrix = np.broadcast_to(per_decode, idx.shape)
    return PairCosts(idx, per_decode, model.predict_matrix(bytes_matrix, idx))
