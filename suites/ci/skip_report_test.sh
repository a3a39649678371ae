#!/usr/bin/env bash
# Skips are counted and explained (issue 42): suites/run_gtest_group.sh reports a group's
# passed, failed and skipped tests with each skip's reason, fails a group in which a test
# skips without one, and ci/test_summary.py counts tests, not ctest entries.
#   skip_report_test.sh FIXTURE_BINARY SOURCE_DIR
set -uo pipefail
fixture=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A skip inside a passing group is visible, with its reason, and recorded.
out=$(FSDPP_TEST_SUMMARY=$work/groups.jsonl FSDPP_CTEST_NAME='Fixture.*' \
  bash "$src/suites/run_gtest_group.sh" "$fixture" '--gtest_filter=Fixture.*' 2>&1) || fail "Fixture.* exited $?: $out"
grep -q '^fsdpp-gtest-group: 1 passed, 0 failed, 1 skipped' <<<"$out" || fail "no count line: $out"
grep -q '^fsdpp-gtest-group: skipped Fixture.SkipsWithAReason: the reason it skips$' <<<"$out" || fail "no reason: $out"
grep -q 'every test of this group was skipped' <<<"$out" && fail "a group with a pass reported as all-skipped"
grep -q '"entry": "Fixture.\*"' "$work/groups.jsonl" || fail "no record: $(cat "$work/groups.jsonl")"

# A group whose every test skipped is reported as such (ctest's SKIP_REGULAR_EXPRESSION).
out=$(bash "$src/suites/run_gtest_group.sh" "$fixture" '--gtest_filter=Fixture.SkipsWithAReason' 2>&1) ||
  fail "the all-skipped group exited $?"
grep -q '^fsdpp-gtest-group: every test of this group was skipped$' <<<"$out" || fail "all-skipped not said: $out"

# A skip without a reason fails the group, naming the test.
out=$(bash "$src/suites/run_gtest_group.sh" "$fixture" '--gtest_filter=Silent.*' 2>&1) &&
  fail "a silent skip passed: $out"
grep -q 'must say why it skips.*Silent.SkipsWithoutAReason' <<<"$out" || fail "the silent skip is not named: $out"

# The run's summary counts tests: the group's 1 + 1, a passing script, a skipped one.
cat >"$work/junit.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="t" tests="3">
  <testcase name="Fixture.*" classname="Fixture.*" status="run"><system-out>...</system-out></testcase>
  <testcase name="lint.format" classname="lint.format" status="run"><system-out>ok</system-out></testcase>
  <testcase name="CudaX.Y" classname="CudaX.Y" status="notrun"><skipped message="SKIP_REGULAR_EXPRESSION_MATCHED"/><system-out>x.cpp:9: Skipped
needs 1 CUDA device(s), this CPU build has 0
[  SKIPPED ] CudaX.Y (0 ms)</system-out></testcase>
</testsuite>
XML
out=$(python3 "$src/ci/test_summary.py" "$work/junit.xml" "$work/groups.jsonl") || fail "test_summary exited $?"
[ "$(tail -n1 <<<"$out")" = "tests: 2 passed, 0 failed, 2 skipped" ] || fail "totals: $out"
grep -q 'Fixture.SkipsWithAReason (Fixture.\* (skip_report_fixture filter=Fixture.\*)): the reason it skips' <<<"$out" || fail "group skip not listed: $out"
grep -q 'CudaX.Y (CudaX.Y): needs 1 CUDA device(s), this CPU build has 0' <<<"$out" || fail "entry skip not listed: $out"
echo "skip_report: ok"
