#!/usr/bin/env bash
# Installs everything fsdpp needs: Debian 12's packages (compilers, libraries, headers) and a
# Python virtual environment with the pinned PyPI torch (LibTorch for the build, the PyTorch
# peers) and the Hugging Face references, from ci/requirements.lock.
#
# Idempotent and quiet: when everything is present it prints nothing and touches nothing.
#
# The environment is keyed by the lock's sha256 and lives outside the clone, in
# $FSDPP_CACHE_DIR (default ~/.cache/fsdpp)/venv-<hash>, so that a fresh clone on the same
# machine reuses it (torch with its CUDA libraries is ~5 GB). <repo>/.venv links to it.
# A half-made environment (an install that died) has no .complete marker and is made anew.
#
# Bad input: a failed install (no registry, a package that will not install, a Python that
# is not 3.11) stops with one line naming the package or the interpreter, and exit 1.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${FSDPP_CACHE_DIR:-$HOME/.cache/fsdpp}
lock=$repo/ci/requirements.lock

fail() { echo "ci/setup.sh: $*" >&2; exit 1; }

packages=(
  build-essential cmake ninja-build ccache
  libgloo-dev             # gloo headers that c10d's ProcessGroupGloo.hpp includes (the wheel has none)
  libyaml-cpp-dev         # YAML inputs of `fsdpp data prepare` and YAML config files
  nlohmann-json3-dev librapidcheck-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libcli11-dev
  libssl-dev              # OpenSSL's libcrypto: SHA-256 of checkpoint files (core/checkpoint/sha256.cpp)
  libpng-dev              # the dashboard test's PNG decoding (harness/testing/png_image.cpp)
  json-schema-test-suite  # the official JSON Schema tests the results validator runs (suites/results)
  chromium                # the dashboard's browser test (suites/results/dashboard_chromium_test.cpp)
  git
  clang-format clang-tidy # ci/lint/: the C++ format and static checks (lint.format, lint.tidy)
  bible-kjv               # the `bible` reader that turns the KJV asset into text (ci/fetch_assets.sh)
)

# The virtual environment, keyed by the lock.
key=$(sha256sum "$lock" | cut -c1-16)
venv=$cache/venv-$key
# Makes the environment (network and unpacking, no Debian package needed): it runs beside
# apt-get, and the script waits for both.
make_venv() {
  # FSDPP_PYTHON, when set, is the only interpreter tried.
  python=""
  candidates=(python3.11 python3)
  [ -z "${FSDPP_PYTHON:-}" ] || candidates=("$FSDPP_PYTHON")
  for candidate in "${candidates[@]}"; do
    command -v "$candidate" >/dev/null || continue
    if "$candidate" -c 'import sys, venv; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      python=$candidate
      break
    fi
  done
  [ -n "$python" ] || fail "needs Python 3.11 with the venv module (the lock pins CPython 3.11 wheels);" \
    "${candidates[*]} is not one; set FSDPP_PYTHON to a 3.11 interpreter"
  echo "ci/setup.sh: installing the Python environment (torch, transformers; ~2.7 GB download) into $venv"
  mkdir -p "$cache"
  rm -rf "$venv"
  "$python" -m venv "$venv" || fail "$python -m venv $venv failed"
  log=$venv/install.log
  # pip installs the lock's uv, and uv the whole lock: it downloads in parallel, about 5x
  # faster than pip here (docs/notes/2026-12-03-ci-fresh-under-30.md). Its cache sits beside
  # the environments, on the same file system, so the venv's files are hard links into it.
  grep -A1 '^uv==' "$lock" >"$venv/uv.lock"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
       -r "$venv/uv.lock" >"$log" 2>&1; then
    fail "pip could not install uv from ci/requirements.lock: $(grep -E '^ERROR' "$log" | head -n1) (log: $log)"
  fi
  if ! UV_CACHE_DIR=$cache/uv-cache "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" \
       --require-hashes --no-deps -r "$lock" >>"$log" 2>&1; then
    # uv's first error, and its first cause, which names what it could not get.
    fail "uv could not install from ci/requirements.lock: $(grep -m1 '^error' "$log")" \
      "($(grep -m1 -oE '^ +cause: .*' "$log" | sed 's/^ *//'); log: $log)"
  fi
  "$venv/bin/python" -c 'import torch, transformers, tokenizers, safetensors, numpy' >>"$log" 2>&1 ||
    fail "the installed environment does not import torch/transformers: $(tail -n1 "$log") (log: $log)"
  touch "$venv/.complete"
}
venv_pid=""
if [ ! -f "$venv/.complete" ]; then
  make_venv &
  venv_pid=$!
  trap 'kill "$venv_pid" 2>/dev/null || true' EXIT  # apt-get failed: stop the install too
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "ci/setup.sh: installing Debian packages: ${missing[*]}"
  log=$(mktemp)
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
          --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    fail "apt-get could not install ${missing[*]}: $(grep -E '^(E|W):' "$log" | tail -n1) (log: $log)"
  fi
  rm -f "$log"
fi

if [ -n "$venv_pid" ]; then
  wait "$venv_pid" || exit 1  # make_venv said why
  trap - EXIT
fi
# <repo>/.venv names the environment of this clone's lock.
if [ "$(readlink "$repo/.venv" 2>/dev/null)" != "$venv" ]; then
  ln -sfn "$venv" "$repo/.venv"
fi
