"""The layer checker: the tree keeps its rules, and a break of each rule is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from backend.tools.layers import check

FILES = {
    # A pure core reaching the database inside a function.
    "backend/sim/bad_db.py": "def f() -> None:\n    import sqlalchemy\n",
    # ... a service package under TYPE_CHECKING, and the web framework from a name.
    "backend/scheduling/bad_types.py": (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from backend.samples.service import ingest\n"
        "from starlette import responses\n"
    ),
    # ... a relative import out of the core into the database module.
    "backend/sim/bad_relative.py": "from ..db import Base\n",
    # The backend importing the workers, hidden in a function.
    "backend/ui/bad_worker.py": "def g() -> None:\n    from workers.tasks import train\n",
    # Allowed: the standard library, numpy, its own package, and sim -> predictor.
    "backend/sim/good.py": (
        "import math\nimport numpy as np\nfrom . import good\nfrom backend.predictor import x\n"
    ),
    "backend/predictor/good.py": "from backend.predictor.regressors import Model\n",
    # Not a core: the service may import what it likes, except the workers.
    "backend/samples/service.py": "import sqlalchemy\nfrom backend.db import Base\n",
}


def _tree(root: Path) -> None:
    for name, text in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                (root / parent / "__init__.py").touch()
        path.write_text(text)


def test_each_break_of_a_rule_is_named_with_its_file_and_line(tmp_path: Path) -> None:
    _tree(tmp_path)
    found = {(str(v.path), v.line, v.module) for v in check(tmp_path)}
    assert found == {
        ("backend/sim/bad_db.py", 2, "sqlalchemy"),
        ("backend/scheduling/bad_types.py", 3, "backend.samples.service.ingest"),
        ("backend/scheduling/bad_types.py", 4, "starlette.responses"),
        ("backend/sim/bad_relative.py", 1, "backend.db.Base"),
        ("backend/ui/bad_worker.py", 2, "workers.tasks.train"),
    }


def test_the_command_fails_on_a_bad_tree_and_says_where(tmp_path: Path) -> None:
    _tree(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "backend.tools.layers", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert "backend/ui/bad_worker.py:2: imports workers.tasks.train" in run.stdout
    assert "backend/sim/bad_db.py:2: imports sqlalchemy" in run.stdout


def test_the_command_passes_on_this_tree() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "backend.tools.layers"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout
