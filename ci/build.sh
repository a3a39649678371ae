#!/usr/bin/env bash
# Configures and builds fsdpp: the one configure path for CI, the demo and the GPU runner
# (ci/gpu.sh). Only where LibTorch comes from differs:
#   FSDPP_TORCH_PYTHON  the Python whose torch to build against (default: <repo>/.venv, made
#                       by ci/setup.sh; the GPU runner passes its own)
#   FSDPP_BUILD_DIR     the build folder (default: <repo>/build, the "default" preset's)
#   FSDPP_JOBS          parallel compile jobs (default: the "default" build preset's 2)
#   FSDPP_EXTRA_PREFIX  more CMake prefixes after torch's (e.g. the GPU runner's .deps)
#   FSDPP_BUILD_TARGETS only these targets (e.g. "fsdpp"; default: all)
#   FSDPP_WERROR        ON (default): a warning in fsdpp's own sources fails the build; the
#                       GPU runner, whose compiler is the GPU machine's, passes OFF
# Extra arguments go to cmake's configure step (e.g. -DCMAKE_CUDA_ARCHITECTURES=native).
# ccache is used when installed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${FSDPP_TORCH_PYTHON:-$repo/.venv/bin/python}
build=${FSDPP_BUILD_DIR:-$repo/build}
[ -x "$(command -v "$python" || true)" ] || { echo "ci/build.sh: no Python at $python (run bash ci/setup.sh)" >&2; exit 1; }
torch_cmake=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  { echo "ci/build.sh: $python cannot import torch (run bash ci/setup.sh)" >&2; exit 1; }

source "$repo/ci/lib/ccache.sh"  # sets `launcher`
# Torch's CMake config warns about things that do not concern this build (kineto,
# CMAKE_CUDA_ARCHITECTURES): the configure output goes to a log, shown when it fails.
mkdir -p "$build"
if ! cmake --preset default -B "$build" -DCMAKE_PREFIX_PATH="$torch_cmake${FSDPP_EXTRA_PREFIX:+;$FSDPP_EXTRA_PREFIX}" \
     -DFSDPP_WERROR="${FSDPP_WERROR:-ON}" "${launcher[@]}" "$@" >"$build/configure.log" 2>&1; then
  grep -E "CMake Error|FATAL|fsdpp" -A3 "$build/configure.log" >&2 || cat "$build/configure.log" >&2
  echo "ci/build.sh: configure failed (log: $build/configure.log)" >&2
  exit 1
fi
# shellcheck disable=SC2086  # the targets are words
cmake --build "$build" -j "${FSDPP_JOBS:-2}" ${FSDPP_BUILD_TARGETS:+--target $FSDPP_BUILD_TARGETS}
