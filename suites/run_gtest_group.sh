#!/usr/bin/env bash
# Runs one group of a GoogleTest binary's tests (suites/cmake/GtestGroups.cmake) and exits
# with its status. When the binary passed and every test of the group was skipped (e.g. the
# CUDA tests on a machine without a GPU), it says so on a line of its own, which ctest
# reads as "skipped" (never on a failure: a failing group keeps its non-zero exit).
#   run_gtest_group.sh BINARY GTEST_ARGS...
set -uo pipefail
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
if [ "$status" = 0 ] && printf '%s\n' "$out" | grep -q '^\[  PASSED  \] 0 tests\.$'; then
  echo "fsdpp-gtest-group: every test of this group was skipped"
fi
exit "$status"
