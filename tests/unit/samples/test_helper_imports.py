"""An ingest helper process imports `backend.samples.offload` and what it needs to store samples:
not the model code, which would cost every helper XGBoost's import time and memory."""

from __future__ import annotations

import subprocess
import sys


def test_the_ingest_helpers_module_does_not_load_the_models() -> None:
    # A fresh interpreter, as a spawned helper starts: this process has long imported all of it.
    code = (
        "import sys, backend.samples.offload; "
        "print(sorted(m for m in ('xgboost', 'scipy', 'backend.predictor.regressors', "
        "'backend.telemetry') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout
