"""A training window as columns: what the sample store reads and the training round takes.

Its own module (numpy only) so that the processes that only store samples, the ingest helpers,
do not load the model code (XGBoost, scipy) with the gate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from backend.predictor.features import Columns

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class WindowRows:
    """A (pool, target) window as columns, in arrival order."""

    cols: Columns
    labels: FloatArray
    is_test: npt.NDArray[np.bool_]
    ids: npt.NDArray[np.int64]
    """Arrival order (the service's sample ids): what "newer" means."""
    predicted: FloatArray | None = None
    """What the router predicted for each row (NaN where it sent nothing)."""
    served_factor: FloatArray | None = None
    """The calibration correction each row's prediction was served with (``served_factors``);
    None: unknown, and the active version's own prediction of the row stands in for it."""
