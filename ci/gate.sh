#!/usr/bin/env bash
# The regression gate as CI runs it: `fsdpp results compare` of a new results document
# against a baseline and, when that finds regressions, one rerun of just the regressed
# cells (`fsdpp bench` with the new document's flags and --filter), compared against the
# same baseline: a regression stands only if the rerun regresses too (`results compare
# --confirm`, harness/results/compare.h). A stall of a shared machine slows every
# repetition of one run alike, which no test over those repetitions can tell from a
# regression; it rarely strikes the same cell twice, a real regression always does.
#
# Usage: ci/gate.sh --new FILE (--baseline FILE | --history DIR [--window K]) --report PREFIX
#          [--fsdpp BIN] [--bench-flags "FLAGS"] [--alpha A] [--confirm-alpha C]
#          [--min-effect F] [--no-rerun]
#   --new          the new fsdpp.results document
#   --baseline     one baseline document; or --history DIR --window K (default 5): the last
#                  K documents of the new document's machine fingerprint
#   --report       PREFIX.md and PREFIX.json get the final report (fsdpp.compare); with a
#                  rerun also PREFIX.first.{md,json} (before it) and PREFIX.rerun.json
#   --fsdpp        the fsdpp binary (default: build/fsdpp of this checkout)
#   --bench-flags  how the new document was benchmarked, without --filter/--out (default
#                  "--preset smoke"); the rerun adds --filter (the regressed cells) and --out
#   --alpha        level of the first comparison (default 0.01, as a lone comparison's)
#   --confirm-alpha  level of the rerun's comparison (default 0.1)
#   --min-effect   passed to `fsdpp results compare` (its default: 5%)
#   --no-rerun     gate on the first comparison alone
# Levels: a regression must be significant twice, in two runs, in the bad direction and by
# the minimum effect each time. The rerun only has to confirm what the first comparison
# found, so its level is looser (0.1): a real slowdown that the noise of one rerun hides
# is still confirmed. Trials (README): a looser first level (0.05) let a machine slowdown
# that outlasted two runs through; 0.01 then 0.1 kept A/A quiet and caught more.
# Exit code: 0 no regression (or none confirmed), 1 a confirmed regression, 2 bad input or a
# failed run.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
fsdpp="$here/build/fsdpp"
new=""
report=""
bench_flags="--preset smoke"
rerun=1
alpha=""
confirm_alpha=0.1
baseline_args=()
compare_flags=()
while (($#)); do
  case "$1" in
    --new) new=$2; shift 2 ;;
    --baseline) baseline_args+=(--baseline "$2"); shift 2 ;;
    --history) baseline_args+=(--history "$2"); shift 2 ;;
    --window) baseline_args+=(--window "$2"); shift 2 ;;
    --report) report=$2; shift 2 ;;
    --fsdpp) fsdpp=$2; shift 2 ;;
    --bench-flags) bench_flags=$2; shift 2 ;;
    --alpha) alpha=$2; shift 2 ;;
    --confirm-alpha) confirm_alpha=$2; shift 2 ;;
    --min-effect) compare_flags+=(--min-effect "$2"); shift 2 ;;
    --no-rerun) rerun=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$fsdpp" ] || { echo "gate.sh: $fsdpp: not an executable (--fsdpp BIN)" >&2; exit 2; }
[ -n "$new" ] && [ -f "$new" ] || { echo "gate.sh: --new '$new': expected a results document" >&2; exit 2; }
[ ${#baseline_args[@]} -gt 0 ] || { echo "gate.sh: give --baseline FILE or --history DIR" >&2; exit 2; }
[ -n "$report" ] || { echo "gate.sh: --report PREFIX is required" >&2; exit 2; }
mkdir -p "$(dirname "$report")"
compare_flags+=(--alpha "${alpha:-0.01}")
[ "$rerun" -eq 1 ] && compare_flags+=(--confirm-alpha "$confirm_alpha")

compare() {  # compare OUT_PREFIX [extra flags...] -> sets $code (0 or 1), exits 2 otherwise
  local prefix=$1
  shift
  code=0
  "$fsdpp" results compare "$new" "${baseline_args[@]}" "${compare_flags[@]}" --markdown "$prefix.md" \
    --json "$prefix.json" "$@" >"$prefix.log" 2>&1 || code=$?
  if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
    echo "gate.sh: fsdpp results compare exited $code:" >&2
    cat "$prefix.log" >&2
    exit 2
  fi
}

if [ "$rerun" -eq 0 ]; then
  compare "$report"
  exit "$code"
fi
compare "$report.first" --regressed-filter "$report.filter"
if [ "$code" -eq 0 ]; then
  cp "$report.first.md" "$report.md"
  cp "$report.first.json" "$report.json"
  echo "gate: no regression"
  exit 0
fi
filter=$(cat "$report.filter")
read -ra bench_args <<<"$bench_flags"
echo "gate: regressions in $filter; rerunning those cells"
if ! "$fsdpp" bench "${bench_args[@]}" --filter "$filter" --out "$report.rerun.json" >"$report.rerun.log" 2>&1; then
  echo "gate.sh: the rerun failed, see $report.rerun.log:" >&2
  tail -n 5 "$report.rerun.log" >&2
  exit 2
fi
compare "$report" --confirm "$report.rerun.json"
if [ "$code" -eq 0 ]; then echo "gate: the rerun did not confirm them: no regression"; else echo "gate: REGRESSION confirmed by the rerun (see $report.md)"; fi
exit "$code"
