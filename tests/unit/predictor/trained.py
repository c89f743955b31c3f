"""Models trained by the product's own training path on the generator's rows, for tests that
check a property of the models Headroom actually serves rather than of a hand-written one."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

from backend.capacity.service import columns
from backend.predictor.features import Target
from backend.predictor.regressors import LatencyModel
from backend.predictor.training import predict_columns, train_target
from backend.scheduling.types import Candidate, FloatArray
from backend.sim.gpu import load_profile
from backend.sim.latency import sample_rows

PROFILE = "a100-llama3-8b"


@cache
def trained(target: Target, rows: int = 4000, seed: int = 0) -> LatencyModel:
    """The hybrid for ``target``, trained on ``rows`` generator rows (none held out)."""
    cols = sample_rows(rows, np.random.default_rng(seed), load_profile(PROFILE))
    labels = cols[f"actual_{target}_ms"]
    return train_target(target, cols, labels, np.zeros(rows, dtype=bool)).model


def predict(rows: Sequence[Candidate]) -> tuple[FloatArray, FloatArray]:
    """Both targets for candidate rows, converted as the service converts them."""
    cols = columns(rows)
    ttft = np.asarray(predict_columns(trained("ttft"), "ttft", cols), dtype=np.float64)
    tpot = np.asarray(predict_columns(trained("tpot"), "tpot", cols), dtype=np.float64)
    return ttft, tpot
