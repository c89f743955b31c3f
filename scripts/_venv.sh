# Sourced by scripts/run and scripts/test: a project-local virtualenv with the project installed.
# Dependencies come from the lock file (exact versions, checked against their hashes), then the
# project itself without dependencies. The install is skipped when neither pyproject.toml nor
# the lock file has changed since the last one.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HEADROOM_VENV:-$ROOT/.venv}"
# ensure_venv run|dev: run installs requirements.lock, dev requirements-dev.lock (a superset).
ensure_venv() {
  local kind="$1" lock stamp
  case "$kind" in
    run) lock="$ROOT/requirements.lock" ;;
    dev) lock="$ROOT/requirements-dev.lock" ;;
    *) echo "ensure_venv: unknown kind $kind" >&2; return 1 ;;
  esac
  if [ ! -x "$VENV/bin/python" ]; then
    echo "==> creating virtualenv $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  stamp="$VENV/.installed-$kind-$(cat "$ROOT/pyproject.toml" "$lock" | sha256sum | cut -c1-16)"
  if [ ! -e "$stamp" ]; then
    echo "==> installing $(basename "$lock") and headroom into $VENV" >&2
    "$VENV/bin/python" -m pip install -q --require-hashes -r "$lock"
    "$VENV/bin/python" -m pip install -q --no-deps -e "$ROOT"
    touch "$stamp"
  fi
}
