#!/usr/bin/env bash
# README command 2: set up, build, and run every test. Non-zero exit on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash ci/setup.sh
bash ci/lib/assets_and_build.sh
# Each GoogleTest group records its counts and skip reasons (suites/run_gtest_group.sh);
# after ctest, ci/test_summary.py prints them per entry and in total.
summary=$(pwd)/build/test-groups.jsonl junit=$(pwd)/build/ctest-junit.xml
rm -f "$summary" "$junit"
status=0
FSDPP_TEST_SUMMARY=$summary ctest --preset default --output-junit "$junit" || status=$?
[ -f "$junit" ] && python3 ci/test_summary.py "$junit" "$summary"
echo "ci/test.sh: set-up, build and tests took $(( $(date +%s) - start )) s"
exit "$status"
