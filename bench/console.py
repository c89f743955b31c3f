"""Server-side render time of every console page, with a full window and 100 model versions.

The database gets a full sample window for the `default` pool (every bucket of both targets at
its cap: 200 buckets x 500 x 2 = 200,000 rows with the default settings, half of them carrying
the router's prediction) and 100 model versions per target (real artifacts, the newest active).
Each page is then requested through the app in-process (no network), signed in as an admin,
after one warm-up; the figures are the server's time per page.

    .venv/bin/python bench/console.py                 # embedded SQLite
    .venv/bin/python bench/console.py --postgres      # PostgreSQL (HEADROOM_BENCH_DATABASE_URL)
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from _common import bench_database_url, machine, recreate_database
from fastapi.testclient import TestClient
from sqlalchemy import text
from training import full_window_rows

from backend import migrate
from backend.app import create_app
from backend.auth.service import create_user
from backend.db import make_engine, make_sessionmaker, unit_of_work
from backend.pools.service import ensure_default_pool
from backend.predictor.training import train_target
from backend.predictor.window import WindowSpec
from backend.registry.models import ActiveModel, ModelVersion
from backend.samples.models import TargetCode
from backend.samples.repository import read_window
from backend.samples.schemas import TrainingEntry
from backend.samples.service import ingest
from backend.settings import Settings, TrainingSettings, WindowSettings
from backend.sim.entries import training_entries

BUDGET_MS = 300.0
VERSIONS = 100
PAGES = (
    "/ui/",
    "/ui/models?target=ttft",
    "/ui/models?target=tpot",
    "/ui/samples",
    "/ui/policies",
    "/ui/objectives",
    "/ui/whatif",
    "/ui/admin",
)


def fill(url: str) -> dict[str, Any]:
    migrate.upgrade(url)
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    settings = Settings(database_url=url)
    spec = WindowSpec.from_settings(settings.window)
    rng = np.random.default_rng(5)
    rows = full_window_rows(spec, rng)
    # Half the samples carry the prediction the router used (a noisy copy of the label).
    entries = training_entries(rows, as_epp=False)
    for i, entry in enumerate(entries):
        if i % 2 == 0:
            entry["predicted_ttft_ms"] = entry["actual_ttft_ms"] * float(rng.lognormal(0, 0.08))
            entry["predicted_tpot_ms"] = entry["actual_tpot_ms"] * float(rng.lognormal(0, 0.08))
    with unit_of_work(sessions) as session:
        ensure_default_pool(session)
        create_user(session, "bench", "bench-password", "admin")
    for i in range(0, len(entries), 10_000):
        with unit_of_work(sessions) as session:
            batch = [TrainingEntry.model_validate(e) for e in entries[i : i + 10_000]]
            ingest(session, 1, batch, spec, settings.window.test_fraction, random.Random(i))
    now = datetime.now(UTC)
    for target in TargetCode:
        with sessions() as session:
            window = read_window(session, 1, target)
        result = train_target(target.label, window.cols, window.labels, window.is_test)
        artifact = result.model.to_artifact()
        assert result.metrics is not None
        with unit_of_work(sessions) as session:
            for n in range(VERSIONS):
                # Varied figures, so that the MAPE chart has a shape.
                mape = result.metrics.mape * (1 + n % 7 / 20)
                metrics = result.metrics.as_dict() | {"mape": mape}
                version = ModelVersion(
                    pool_id=1,
                    target=int(target),
                    kind="hybrid",
                    objective="mean",
                    quantile=0.9,
                    status="retired" if n < VERSIONS - 1 else "active",
                    gate_reason="bench",
                    metrics=metrics,
                    n_train=result.n_train,
                    n_test=result.n_test,
                    window_max_id=window.max_id,
                    train_seconds=result.train_seconds,
                    training_started_at=now - timedelta(seconds=10 * (VERSIONS - n)),
                    created_at=now - timedelta(seconds=10 * (VERSIONS - n)),
                    artifact=artifact,
                    artifact_bytes=len(artifact),
                )
                session.add(version)
                session.flush()
            session.add(
                ActiveModel(
                    pool_id=1,
                    target=int(target),
                    version_id=version.id,
                    activated_at=now,
                    activated_by="bench",
                )
            )
    if engine.dialect.name == "postgresql":
        # Fresh statistics, as autovacuum keeps them in a running system (a bulk load just
        # happened; without them the planner guesses and the first figures measure that).
        with engine.connect() as conn:
            conn.execute(text("ANALYZE"))
    engine.dispose()
    return {"window_rows": 2 * len(entries), "model_versions_per_target": VERSIONS}


def measure(url: str, repeats: int) -> dict[str, Any]:
    settings = Settings(
        database_url=url,
        auto_migrate=False,
        # Nothing in the background competes with the pages being timed.
        training=TrainingSettings(interval_s=3600),
        window=WindowSettings(trim_interval_s=3600),
    )
    out: dict[str, Any] = {}
    with TestClient(create_app(settings)) as client:
        page = client.get("/ui/login").text
        match = re.search(r'name="csrf_token" value="([^"]+)"', page)
        assert match is not None
        response = client.post(
            "/ui/login",
            data={"username": "bench", "password": "bench-password", "csrf_token": match[1]},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        for path in PAGES:
            assert client.get(path).status_code == 200, path  # warm-up: imports, caches
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                response = client.get(path)
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200
            out[path] = {
                "median_ms": round(statistics.median(times), 1),
                "max_ms": round(max(times), 1),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL instead of SQLite")
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.postgres:
            url = bench_database_url("headroom_bench_console")
            recreate_database(url)
        else:
            url = f"sqlite:///{Path(tmp) / 'console.db'}"
        started = time.perf_counter()
        data = fill(url)
        fill_s = time.perf_counter() - started
        pages = measure(url, args.repeats)
    print(
        json.dumps(
            {
                "benchmark": "console page render time (server side, in-process)",
                "database": "postgresql" if args.postgres else "sqlite",
                **data,
                "setup_s": round(fill_s, 1),
                "repeats": args.repeats,
                "budget_ms": BUDGET_MS,
                "pages": pages,
                "slowest_max_ms": max(p["max_ms"] for p in pages.values()),
                "all_within_budget": all(p["max_ms"] <= BUDGET_MS for p in pages.values()),
                "machine": machine(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
