"""The layer rules of docs/architecture.md, checked: `python -m backend.tools.layers [ROOT]`.

1. backend/ never imports workers/: the backend enqueues Celery tasks by name, and workers/
   depends on backend/, never the reverse.
2. The pure cores (backend/predictor, backend/scheduling, backend/sim) import only the standard
   library, the numeric libraries of `THIRD_PARTY`, and the pure modules that `PURE` lets each
   one use: no web framework, no database, no service package. A core is then usable (and
   testable) without a server, and the simulator cannot reach into the service's state.

Imports are read from the source with `ast`, wherever they stand: inside functions, under
`if TYPE_CHECKING:`, in `try` blocks. Exits 1 and names each file, line and import that breaks a
rule; 0 when there is none. (An import made from a string at run time is not seen.)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# Each pure module or package, and the other pure ones it may import (its own package always).
# The direction is today's: the simulator builds on the predictor (whose window and promotion
# gate it shares with the service) and the scheduling library; the predictor reads its knobs
# from the settings' plain pydantic models (backend.settings imports nothing of backend).
PURE: dict[str, frozenset[str]] = {
    "backend.predictor": frozenset({"backend.settings"}),
    "backend.scheduling": frozenset(),
    "backend.sim": frozenset({"backend.predictor", "backend.scheduling", "backend.settings"}),
    "backend.settings": frozenset(),
}
# Third-party packages a pure module may use: numerics, models, plots, config parsing. Not
# sqlalchemy, fastapi, starlette, celery, redis, ...
THIRD_PARTY = frozenset({"numpy", "xgboost", "matplotlib", "yaml", "pydantic", "pydantic_settings"})
STDLIB = frozenset(sys.stdlib_module_names)


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    module: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module}: {self.rule}"


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in the file; `from a import b` gives `a.b`, which is
    the module b or an attribute of a (either way, it starts with what is imported from)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the file's package
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def pure_unit(name: str) -> str | None:
    """The entry of PURE that the module belongs to, if any."""
    return next((unit for unit in PURE if _within(name, unit)), None)


def _parents(unit: str) -> set[str]:
    parts = unit.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def check(root: Path) -> list[Violation]:
    backend = root / "backend"
    # Importing a pure module runs its parent packages' __init__: they must be pure too.
    parents = set().union(*(_parents(unit) for unit in PURE))
    violations = []
    for path in sorted(backend.rglob("*.py")):
        name = module_name(root, path)
        unit = pure_unit(name)
        allowed = {unit, *PURE[unit]} if unit else set()
        for line, module in imported(path, name):
            top = module.partition(".")[0]
            shown = path.relative_to(root)
            if top == "workers":
                rule = "backend/ must not import workers/ (enqueue Celery tasks by name)"
                violations.append(Violation(shown, line, module, rule))
            elif (unit or name in parents) and not (
                top in STDLIB
                or top in THIRD_PARTY
                or any(_within(module, a) for a in allowed)
                or (module in parents)
            ):
                rule = (
                    f"{unit or name} is pure: only the standard library, "
                    f"{', '.join(sorted(THIRD_PARTY))} and {', '.join(sorted(allowed)) or 'itself'}"
                )
                violations.append(Violation(shown, line, module, rule))
    return violations


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    violations = check(root)
    for violation in violations:
        print(violation)
    if violations:
        print(f"{len(violations)} import(s) break the layer rules (docs/architecture.md)")
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
