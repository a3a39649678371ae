#!/usr/bin/env bash
# ci/setup.sh's bad input: an impossible install stops with one line naming the cause
# (the interpreter, or the package pip or uv could not get) and a non-zero exit, and writes
# nothing into the real cache. Each case installs into a throw-away FSDPP_CACHE_DIR.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/setup_errors.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

expect_one_line() {  # NAME WORDS... : the last run exited non-zero with one stderr line holding WORDS
  local name=$1 code lines
  shift
  code=$(cat "$work/code")
  lines=$(grep -c . "$work/err" || true)
  if [ "$code" = 0 ] || [ "$lines" != 1 ]; then
    echo "FAIL $name: exit $code, $lines stderr lines:"; cat "$work/err"; failures=$((failures + 1)); return
  fi
  for w in "$@"; do
    grep -qF -- "$w" "$work/err" || { echo "FAIL $name: no '$w' in: $(cat "$work/err")"; failures=$((failures + 1)); return; }
  done
  echo "ok   $name: $(cat "$work/err")"
}

run_setup() {  # ENV... : runs ci/setup.sh with those variables, no stdin
  env FSDPP_CACHE_DIR="$work/cache" "$@" bash "$repo/ci/setup.sh" </dev/null >/dev/null 2>"$work/err"
  echo $? >"$work/code"
}

# A Python that is not 3.11.
run_setup FSDPP_PYTHON=/usr/bin/false
expect_one_line wrong-python "needs Python 3.11" "/usr/bin/false"

# No registry: pip cannot reach an index (a closed port on loopback), so the lock's uv, which
# it installs first, cannot be had; the line names pip, the lock and the package.
py=$(command -v python3.11 || command -v python3)
run_setup FSDPP_PYTHON="$py" PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_RETRIES=0 PIP_TIMEOUT=2 PIP_NO_CACHE_DIR=1 \
  PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null
expect_one_line no-registry "pip could not install uv from ci/requirements.lock" "uv==$(sed -n 's/^uv==\([^ ]*\).*/\1/p' \
  "$repo/ci/requirements.lock")"

# uv without a registry (pip gets uv from PyPI, as set-up does; uv's index is the closed port):
# the packages cannot be had; the line names uv, the lock and the page of the package that
# failed first (uv fetches several at once).
run_setup FSDPP_PYTHON="$py" UV_DEFAULT_INDEX=http://127.0.0.1:9/simple UV_INDEX_URL=http://127.0.0.1:9/simple \
  UV_HTTP_TIMEOUT=2 UV_NO_CONFIG=1
expect_one_line uv-no-registry "uv could not install from ci/requirements.lock" "cause: Failed to fetch" \
  "http://127.0.0.1:9/simple/"

# The failed install left no environment that a later run would take as complete.
if ls "$work"/cache/venv-*/.complete >/dev/null 2>&1; then
  echo "FAIL: a failed install left a .complete marker"; failures=$((failures + 1))
fi
echo "$((3 - failures)) passed, $failures failed"
[ "$failures" = 0 ]
