#!/usr/bin/env bash
# README command 1: set up, build, and run the main job. For now that is the collective
# self-check on 2 local ranks (every collective, checked and timed).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
bash ci/build.sh >/dev/null
exec ./build/fsdpp selfcheck --nproc 2 "$@"
