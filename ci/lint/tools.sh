# shellcheck shell=bash
# Sourced by ci/lint/*.sh and ci/format.sh: finds the linters, or stops with one line naming
# the missing one and where it comes from (exit 1).
#   lint_repo            the repository root
#   lint_need NAME PKG   NAME on PATH, else "ci/...: NAME not found (PKG)"
#   lint_ruff            ruff: the virtual environment's (ci/requirements.lock pins it), else PATH
lint_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

lint_need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "${0#"$lint_repo/"}: $1 not found (expected on PATH: $2; bash ci/setup.sh installs it)" >&2
  exit 1
}

lint_ruff() {
  if [ -x "$lint_repo/.venv/bin/ruff" ]; then
    echo "$lint_repo/.venv/bin/ruff"
  elif command -v ruff >/dev/null 2>&1; then
    command -v ruff
  else
    echo "${0#"$lint_repo/"}: ruff not found (expected $lint_repo/.venv/bin/ruff from ci/requirements.lock:" \
      "bash ci/setup.sh installs it)" >&2
    exit 1
  fi
}
