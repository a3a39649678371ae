#!/usr/bin/env bash
# README command 2: set up, build, and run every test. Non-zero exit on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash ci/setup.sh
bash ci/fetch_assets.sh
bash ci/build.sh
ctest --preset default
echo "ci/test.sh: set-up, build and tests took $(( $(date +%s) - start )) s"
