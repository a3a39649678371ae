#!/usr/bin/env bash
# ci/fetch_assets.sh beside ci/build.sh: the assets are downloads and single-threaded Python,
# which fit in the build's gaps (the precompiled header and the links keep one core), so
# the two together take about as long as the build alone. Waits for both; exits with the
# build's status if it failed, else with the assets'. Arguments and the environment go to
# ci/build.sh (FSDPP_BUILD_TARGETS, FSDPP_JOBS, ...).
set -uo pipefail
ci=$(cd "$(dirname "$0")/.." && pwd)
bash "$ci/fetch_assets.sh" &
assets_pid=$!
trap 'kill "$assets_pid" 2>/dev/null || true' INT TERM
build_status=0
bash "$ci/build.sh" "$@" || build_status=$?
assets_status=0
wait "$assets_pid" || assets_status=$?
[ "$build_status" = 0 ] || exit "$build_status"
exit "$assets_status"
