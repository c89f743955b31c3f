# Sourced by scripts/run and scripts/test: a project-local virtualenv with the project installed.
# The install is skipped when pyproject.toml has not changed since the last one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HEADROOM_VENV:-$ROOT/.venv}"
ensure_venv() {
  local extras="$1" stamp
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtualenv $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  stamp="$VENV/.installed-$extras-$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
  if [ ! -e "$stamp" ]; then
    echo "==> installing headroom[$extras] into $VENV" >&2
    "$VENV/bin/python" -m pip install -q -e "$ROOT[$extras]"
    touch "$stamp"
  fi
}
