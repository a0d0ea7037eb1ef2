#!/usr/bin/env bash
# One entry point for set-up and the two jobs README.md names:
#   ./run.sh demo   -> create .venv (Python >= 3.12), install, run `discern-stats demo`
#   ./run.sh test   -> create .venv (Python >= 3.12), install, run the test suite
# Set PYTHON=/path/to/python3.12 to choose the interpreter; VENV=dir to choose the venv.
set -euo pipefail
cd "$(dirname "$0")"
VENV="${VENV:-.venv}"

find_python() {
  local cands=()
  [ -n "${PYTHON:-}" ] && cands+=("$PYTHON")
  cands+=(python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    for v in $(pyenv versions --bare 2>/dev/null | grep -E '^3\.(1[2-9])' | sort -rV); do
      cands+=("$(pyenv prefix "$v")/bin/python3")
    done
  fi
  cands+=(python3)
  for c in "${cands[@]}"; do
    if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
      echo "$c"; return 0
    fi
  done
  return 1
}

ensure_env() {
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'; then
    local py
    if ! py=$(find_python); then
      echo "run.sh: discern_stats needs Python >= 3.12 (PyMC 6 / ArviZ 1); none found." >&2
      echo "run.sh: install one (e.g. 'pyenv install 3.12') or set PYTHON=/path/to/python3.12." >&2
      exit 3
    fi
    echo "run.sh: creating $VENV with $py ($("$py" --version 2>&1))"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
  fi
  # install once per version of the dependency files (an editable install picks up code changes)
  local stamp="$VENV/.discern_stats_installed" want
  want=$(cat pyproject.toml constraints.txt | "$VENV/bin/python" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/discern-stats" ]; then
    return 0
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e '.[dev]'
  echo "$want" > "$stamp"
}

cmd="${1:-}"; shift || true
case "$cmd" in
  demo)
    ensure_env
    exec "$VENV/bin/discern-stats" demo "$@" ;;
  test)
    ensure_env
    exec "$VENV/bin/python" -m pytest "$@" ;;
  *)
    echo "usage: ./run.sh demo [demo options] | ./run.sh test [pytest options]" >&2
    exit 2 ;;
esac
