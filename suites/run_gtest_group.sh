#!/usr/bin/env bash
# Runs one group of a GoogleTest binary's tests (suites/cmake/GtestGroups.cmake) and exits
# with its status. Then suites/gtest_group_report.py prints the group's counts (passed,
# failed, skipped) and every skipped test with its reason, and records them for
# ci/test_summary.py when FSDPP_TEST_SUMMARY is set; a test that skips without a reason
# fails the group. When the binary passed and every test of the group was skipped (e.g.
# the CUDA tests on a machine without a GPU), it says so on a line of its own, which ctest
# reads as "skipped" (never on a failure: a failing group keeps its non-zero exit).
#   run_gtest_group.sh BINARY GTEST_ARGS...
set -uo pipefail
report=$(mktemp --suffix=.xml)
trap 'rm -f "$report"' EXIT
out=$("$@" --gtest_output="xml:$report" 2>&1)
status=$?
printf '%s\n' "$out"
label="$(basename "$1")"
for arg in "${@:2}"; do
  case "$arg" in --gtest_filter=* | --gtest_shard_index=*) label="$label ${arg#--gtest_}" ;; esac
done
[ -n "${GTEST_SHARD_INDEX:-}" ] && label="$label shard $GTEST_SHARD_INDEX/${GTEST_TOTAL_SHARDS:-?}"
# The report needs only the standard library: ci/setup.sh's venv Python starts directly, where
# `python3` on PATH may be a version manager's shim that costs more than the report itself.
python=$(dirname "$0")/../.venv/bin/python
[ -x "$python" ] || python=python3
if [ -s "$report" ]; then
  "$python" "$(dirname "$0")/gtest_group_report.py" "$report" "$label"
  reported=$?
  [ "$status" = 0 ] && [ "$reported" != 0 ] && status=$reported
elif [ "$status" = 0 ]; then
  echo "fsdpp-gtest-group: $label wrote no report" >&2
  status=1
fi
if [ "$status" = 0 ] && printf '%s\n' "$out" | grep -q '^\[  PASSED  \] 0 tests\.$'; then
  echo "fsdpp-gtest-group: every test of this group was skipped"
fi
exit "$status"
