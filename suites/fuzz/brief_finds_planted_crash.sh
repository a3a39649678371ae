#!/usr/bin/env bash
# fuzz_brief's own check (suites/CMakeLists.txt): its planted_crash target aborts only on an
# input that a dictionary-word mutation of its seed makes. The driver must find it, name it
# in one line, keep it in the findings folder and die by SIGABRT (exit 134 from bash).
#   brief_finds_planted_crash.sh FUZZ_BRIEF FINDINGS_DIR
set -uo pipefail
fuzz_brief=$1
findings=$2
rm -rf "$findings"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$fuzz_brief" planted_crash --seed 1 --runs 200000 --seconds 60 --findings "$findings" 2>"$log"
code=$?
cat "$log"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$code" -eq 134 ] || fail "fuzz_brief exited $code, expected 134 (SIGABRT from the planted defect)"
grep -q "^fuzz_brief: FINDING in planted_crash: the input that crashed is kept in $findings/planted_crash-finding" "$log" ||
  fail "no FINDING line naming $findings/planted_crash-finding"
grep -q "fsdpp-planted" "$findings/planted_crash-finding" || fail "the kept input does not hold the planted bytes"
echo "fuzz_brief found the planted crash and kept its input"
