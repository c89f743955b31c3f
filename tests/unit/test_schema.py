"""The schema is found, not listed: `load_all_models()` knows every table the migrations make."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import inspect

from backend import migrate
from backend.db import make_engine

# A fresh interpreter: in this one, other tests' imports would already have declared the tables.
KNOWN_TABLES = (
    "import json; from backend.db import Base, load_all_models; load_all_models(); "
    "print(json.dumps(sorted(Base.metadata.tables)))"
)


def test_load_all_models_declares_exactly_the_migrated_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'schema.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    migrated = set(inspect(engine).get_table_names()) - {"alembic_version"}
    engine.dispose()
    out = subprocess.run(
        [sys.executable, "-c", KNOWN_TABLES], capture_output=True, text=True, check=True
    ).stdout
    declared = set(json.loads(out))
    assert declared == migrated
    assert {"samples", "pools", "users", "model_versions"} <= declared
