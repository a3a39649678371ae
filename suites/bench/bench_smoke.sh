#!/usr/bin/env bash
# bench.smoke: runs the smoke preset of the benchmark matrix for real and checks the
# document it writes (bench_tests' SmokeDocument tests: schema, every cell, peers filled,
# every metric, the analytic ZeRO-3 volume).
#
# Usage: bench_smoke.sh FSDPP_BINARY BENCH_TESTS_BINARY [OUT_DIR]
#   OUT_DIR keeps smoke.json and bench.log (default: a temporary directory, removed).
#   FSDPP_SMOKE_REPETITIONS: launches per cell (default 1: this checks that the benchmark
#   runs and reports; the committed baselines are `fsdpp bench --preset smoke` runs with
#   the preset's own repetitions).
set -uo pipefail
if [ $# -lt 2 ] || [ ! -x "$1" ] || [ ! -x "$2" ]; then
  echo "usage: $0 FSDPP_BINARY BENCH_TESTS_BINARY [OUT_DIR]" >&2
  exit 2
fi
fsdpp=$1
tests=$2
if [ -n "${3:-}" ]; then
  out=$3
  mkdir -p "$out"
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/bench_smoke.XXXXXX")
  trap 'rm -rf "$out"' EXIT
fi

start=$(date +%s)
"$fsdpp" bench --preset smoke --repetitions "${FSDPP_SMOKE_REPETITIONS:-1}" --out "$out/smoke.json" 2>&1 |
  tee "$out/bench.log"
bench_status=${PIPESTATUS[0]}
echo "bench_smoke: fsdpp bench exited $bench_status after $(($(date +%s) - start)) s"
if [ ! -f "$out/smoke.json" ]; then
  echo "bench_smoke: no document written" >&2
  exit 1
fi
FSDPP_BENCH_SMOKE_DOC="$out/smoke.json" "$tests" --gtest_filter='SmokeDocument.*'
check_status=$?
[ "$bench_status" -eq 0 ] && [ "$check_status" -eq 0 ]
