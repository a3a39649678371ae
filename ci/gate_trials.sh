#!/usr/bin/env bash
# A/A and injected-slowdown trials of the regression gate (`fsdpp results compare`).
#
# Each trial runs the same benchmark cell(s) with `fsdpp bench`: A (K times with
# --baseline-runs K, pooled as a history window, as CI's baseline is), A again, and A with
# --inject-delay-pct P (fsdpp cells sleep P% of each step inside the timed
# region). It then gates A' against A (an alarm there is a false alarm) and the slowed
# run against A (an alarm there is a detection) with ci/gate.sh, as CI does: a regression
# is rerun once (the slowed arm's rerun slowed too) and stands only if the rerun regresses
# too (--no-rerun: the first comparison alone). Prints the A/A false-alarm rate and the
# detection rate, also of the first comparisons alone, and writes them with every
# trial's outcome as JSON (format "fsdpp.gate-trials" version 2, results/README.md).
#
# Usage: ci/gate_trials.sh [--fsdpp BIN] [--trials T] [--filter REGEX] [--preset NAME]
#          [--delay-pct P] [--repetitions R] [--alpha A] [--confirm-alpha C] [--min-effect F] [--out DIR]
#          [--json FILE] [--no-rerun] [--baseline-runs K]
#   --fsdpp        the fsdpp binary (default: build/fsdpp of this checkout)
#   --trials       trials (default 10)
#   --filter       cells of the preset to run (default: the gpt2-tiny full_shard cell;
#                  `fsdpp bench` adds the unsharded baseline it needs)
#   --preset       default smoke
#   --delay-pct    injected slowdown, percent of each step (default 15)
#   --repetitions  passed to `fsdpp bench` (default: its own)
#   --alpha, --confirm-alpha, --min-effect  passed to ci/gate.sh (default: its own)
#   --out          keep every document and report here (default: a temporary directory)
#   --json         the summary (default: OUT/gate_trials.json)
#   --no-rerun     gate without ci/gate.sh's confirmation rerun
#   --baseline-runs  A runs pooled into the baseline (default 1: A alone)
# Exit code: 0 when the trials ran (whatever the rates), 2 on a failed run or bad input.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
fsdpp="$here/build/fsdpp"
trials=10
filter='^gpt2-tiny/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0$'
preset=smoke
delay_pct=15
repetitions=""
baseline_runs=1
rerun_flag=()
compare_flags=()
out=""
json=""
while (($#)); do
  case "$1" in
    --fsdpp) fsdpp=$2; shift 2 ;;
    --trials) trials=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    --delay-pct) delay_pct=$2; shift 2 ;;
    --repetitions) repetitions=$2; shift 2 ;;
    --alpha) compare_flags+=(--alpha "$2"); shift 2 ;;
    --confirm-alpha) compare_flags+=(--confirm-alpha "$2"); shift 2 ;;
    --min-effect) compare_flags+=(--min-effect "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --no-rerun) rerun_flag=(--no-rerun); shift ;;
    --baseline-runs) baseline_runs=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gate_trials.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$fsdpp" ] || { echo "gate_trials.sh: $fsdpp: not an executable (--fsdpp BIN)" >&2; exit 2; }
[[ "$trials" =~ ^[1-9][0-9]*$ ]] || { echo "gate_trials.sh: --trials $trials: expected a positive integer" >&2; exit 2; }
[[ "$baseline_runs" =~ ^[1-9][0-9]*$ ]] || { echo "gate_trials.sh: --baseline-runs $baseline_runs: expected a positive integer" >&2; exit 2; }
if [ -z "$out" ]; then
  out=$(mktemp -d "${TMPDIR:-/tmp}/gate_trials.XXXXXX")
  keep=0
else
  mkdir -p "$out"
  keep=1
fi
json=${json:-$out/gate_trials.json}

bench() {  # bench OUT_FILE [extra flags...]
  local file=$1
  shift
  local flags=(bench --preset "$preset" --filter "$filter" --out "$file")
  [ -n "$repetitions" ] && flags+=(--repetitions "$repetitions")
  if ! "$fsdpp" "${flags[@]}" "$@" >"$file.log" 2>&1; then
    echo "gate_trials.sh: fsdpp bench failed, see $file.log:" >&2
    tail -n 5 "$file.log" >&2
    exit 2
  fi
}

gate() {  # gate NEW TRIAL_DIR REPORT_PREFIX BENCH_FLAGS -> prints the exit code (0 or 1)
  local code=0
  local baseline=(--baseline "$2/a.json")
  [ "$baseline_runs" -gt 1 ] && baseline=(--history "$2/history" --window "$baseline_runs")
  "$here/ci/gate.sh" --fsdpp "$fsdpp" --new "$1" "${baseline[@]}" --report "$3" --bench-flags "$4" \
    "${rerun_flag[@]}" "${compare_flags[@]}" >"$3.gate.log" 2>&1 || code=$?
  if [ "$code" -ne 0 ] && [ "$code" -ne 1 ]; then
    echo "gate_trials.sh: ci/gate.sh exited $code:" >&2
    cat "$3.gate.log" >&2
    exit 2
  fi
  echo "$code"
}

# Did the first comparison (before any rerun) of REPORT_PREFIX flag a regression?
first_alarm() {
  local first="$1.first.json"
  [ -f "$first" ] || first="$1.json"
  grep -q '"regression": true' "$first" && echo 1 || echo 0
}

bench_flags="--preset $preset${repetitions:+ --repetitions $repetitions}"

false_alarms=0
detections=0
first_false_alarms=0
first_detections=0
rows=""
start=$(date +%s)
for ((t = 1; t <= trials; t++)); do
  dir="$out/trial-$t"
  mkdir -p "$dir"
  bench "$dir/a.json"
  if [ "$baseline_runs" -gt 1 ]; then
    "$fsdpp" results append "$dir/a.json" --history "$dir/history" >/dev/null
    for ((k = 2; k <= baseline_runs; k++)); do
      bench "$dir/a$k-baseline.json"
      "$fsdpp" results append "$dir/a$k-baseline.json" --history "$dir/history" >/dev/null
    done
  fi
  bench "$dir/a2.json"
  bench "$dir/slow.json" --inject-delay-pct "$delay_pct"
  aa=$(gate "$dir/a2.json" "$dir" "$dir/aa-gate" "$bench_flags")
  slow=$(gate "$dir/slow.json" "$dir" "$dir/slow-gate" "$bench_flags --inject-delay-pct $delay_pct")
  aa_first=$(first_alarm "$dir/aa-gate")
  slow_first=$(first_alarm "$dir/slow-gate")
  false_alarms=$((false_alarms + aa))
  detections=$((detections + slow))
  first_false_alarms=$((first_false_alarms + aa_first))
  first_detections=$((first_detections + slow_first))
  echo "trial $t/$trials: A/A $([ "$aa" -eq 1 ] && echo ALARM || echo quiet), +${delay_pct}% $([ "$slow" -eq 1 ] && echo detected || echo MISSED) ($(($(date +%s) - start)) s)"
  b() { [ "$1" -eq 1 ] && echo true || echo false; }
  rows+="${rows:+,}{\"trial\": $t, \"aa_alarm\": $(b "$aa"), \"slowdown_detected\": $(b "$slow"), \"aa_first_alarm\": $(b "$aa_first"), \"slowdown_first_detected\": $(b "$slow_first")}"
done

# The levels the gate used, as its first trial's report records them.
levels=$(python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["options"]; print("\"alpha\": %s, \"confirm_alpha\": %s, \"min_effect\": %s" % (o["alpha"], o["confirm_alpha"], o["min_effect"]))' "$out/trial-1/aa-gate.json")

rate() { awk -v n="$1" -v d="$2" 'BEGIN { printf "%.4f", n / d }'; }
aa_rate=$(rate "$false_alarms" "$trials")
detection_rate=$(rate "$detections" "$trials")
first_aa_rate=$(rate "$first_false_alarms" "$trials")
first_detection_rate=$(rate "$first_detections" "$trials")
filter_json=$(printf '%s' "$filter" | sed 's/\\/\\\\/g; s/"/\\"/g')
cat >"$json" <<EOF
{
  "format": "fsdpp.gate-trials",
  "version": 2,
  "preset": "$preset",
  "filter": "$filter_json",
  "trials": $trials,
  "delay_pct": $delay_pct,
  "compare_flags": "${compare_flags[*]}",
  "rerun": $([ ${#rerun_flag[@]} -eq 0 ] && echo true || echo false),
  "baseline_runs": $baseline_runs,
  $levels,
  "aa_false_alarms": $false_alarms,
  "aa_false_alarm_rate": $aa_rate,
  "detections": $detections,
  "detection_rate": $detection_rate,
  "first_comparison": {"aa_false_alarms": $first_false_alarms, "aa_false_alarm_rate": $first_aa_rate, "detections": $first_detections, "detection_rate": $first_detection_rate},
  "per_trial": [$rows]
}
EOF
echo "gate trials: A/A false-alarm rate $aa_rate ($false_alarms/$trials), detection rate of +${delay_pct}% $detection_rate ($detections/$trials); first comparison alone: $first_aa_rate ($first_false_alarms/$trials) and $first_detection_rate ($first_detections/$trials); wrote $json"
if [ "$keep" -eq 0 ] && [[ "$json" != "$out"/* ]]; then rm -rf "$out"; fi
