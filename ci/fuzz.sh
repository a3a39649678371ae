#!/usr/bin/env bash
# Fuzzes every reader of untrusted bytes (suites/fuzz/README.md): builds the libFuzzer
# targets with clang, ASan and UBSan into build-fuzz, replays every kept regression input
# (suites/fuzz/regressions/<target>/: each must pass), then runs each target for
# SECONDS_PER_TARGET on a scratch copy of its seed corpus, one fuzzer process at a time,
# under nice. With OUT_JSON, writes the run's figures there atomically (format
# "fsdpp.fuzz-run" version 1, specified in suites/fuzz/README.md).
#
#   ci/fuzz.sh [SECONDS_PER_TARGET] [OUT_JSON]      (default 60 s per target)
#   FSDPP_FUZZ_RUNS=-1 ci/fuzz.sh 600 results/reliability/fuzz-DATE.json   (the campaign)
#
# Inputs that crash are kept in build-fuzz/findings/<target>/ (listed in OUT_JSON).
# Exit: 0 when nothing crashed; 1 when a regression input or a fuzzer crashed; 2 when clang
# or libFuzzer is missing, the build fails, or the arguments are wrong.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
out_json=${2:-}
build=$repo/build-fuzz
fuzz_src=$repo/suites/fuzz

die() { echo "ci/fuzz.sh: $*" >&2; exit 2; }
[[ $seconds =~ ^[1-9][0-9]*$ ]] || die "SECONDS_PER_TARGET must be a positive integer, got '$seconds'"
command -v clang++ >/dev/null && command -v clang >/dev/null ||
  die "clang/clang++ not found: the fuzz targets need clang's libFuzzer (Debian: apt-get install clang)"
command -v cmake >/dev/null && command -v ninja >/dev/null || die "cmake and ninja are needed to build the fuzz targets"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$probe/probe.cpp"
clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>"$probe/log" ||
  die "clang++ cannot link a libFuzzer program (libclang_rt.fuzzer missing?): $(head -c 300 "$probe/log")"

# The tree the targets are built from, read before the build: HEAD may move during a
# campaign of an hour. Not `git status | grep -q .`: grep leaves at the first line and,
# under pipefail, git's SIGPIPE made a dirty tree read as clean.
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=false
[ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ] && dirty=true

# Everything runs under nice: this machine may be timing benchmarks at the same time.
build_start=$(date +%s)
nice -n 19 cmake -S "$fuzz_src" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  >"$probe/configure.log" 2>&1 || { cat "$probe/configure.log" >&2; die "configuring build-fuzz failed (log above)"; }
nice -n 19 ninja -C "$build" -j "${FSDPP_FUZZ_BUILD_JOBS:-2}" >"$probe/build.log" 2>&1 ||
  { tail -n 60 "$probe/build.log" >&2; die "building the fuzz targets failed (last lines above)"; }
build_s=$(( $(date +%s) - build_start ))
mapfile -t targets <"$build/targets.txt"
echo "ci/fuzz.sh: built ${#targets[@]} fuzz targets in ${build_s} s"

common_flags=(-timeout=10 -rss_limit_mb=2048)
# -len_control=0: mutate at the seeds' full length from the start. The seeds are whole
# documents (JSON, YAML, headers); libFuzzer's default grows the length limit slowly, so for
# minutes it would mutate only truncated, and so invalid, copies of them.
fuzz_flags=(-len_control=0)
failed=0

# 1. Every kept crashing input must now be read without a finding.
replayed=0
for t in "${targets[@]}"; do
  dir=$fuzz_src/regressions/$t
  [ -d "$dir" ] || continue
  mapfile -t inputs < <(find "$dir" -type f | sort)
  [ "${#inputs[@]}" -gt 0 ] || continue
  if ! nice -n 19 "$build/${t}_fuzz" "${common_flags[@]}" "${inputs[@]}" >"$probe/replay-$t.log" 2>&1; then
    tail -n 30 "$probe/replay-$t.log" >&2
    echo "ci/fuzz.sh: FAIL: a regression input of $t still crashes (suites/fuzz/regressions/$t)" >&2
    failed=1
  fi
  replayed=$((replayed + ${#inputs[@]}))
done
echo "ci/fuzz.sh: replayed $replayed regression inputs"

# 2. Each target for $seconds on a scratch copy of its corpus (the committed seeds stay as
# they are). The run stops at the first crash; -runs bounds a target that is very fast
# (FSDPP_FUZZ_RUNS overrides the bound; -1 lets every target run for its whole time, as a
# campaign should).
runs_bound=${FSDPP_FUZZ_RUNS:-$((seconds * 50000))}
[[ $runs_bound =~ ^(-1|[1-9][0-9]*)$ ]] || die "FSDPP_FUZZ_RUNS must be -1 or a positive integer, got '$runs_bound'"
rm -rf "$build/corpus" "$build/findings" "$build/logs"
mkdir -p "$build/corpus" "$build/findings" "$build/logs"
results=$probe/results.tsv
: >"$results"
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  findings=$build/findings/$t
  mkdir -p "$corpus" "$findings"
  [ -d "$fuzz_src/corpus/$t" ] && cp -r "$fuzz_src/corpus/$t/." "$corpus/"
  dict=()
  [ -f "$fuzz_src/$t.dict" ] && dict=(-dict="$fuzz_src/$t.dict")
  log=$build/logs/$t.log
  start=$(date +%s)
  set +e
  nice -n 19 "$build/${t}_fuzz" "${common_flags[@]}" "${fuzz_flags[@]}" "${dict[@]}" -max_total_time="$seconds" \
    -runs="$runs_bound" -print_final_stats=1 -artifact_prefix="$findings/" "$corpus" >"$log" 2>&1
  code=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  executions=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log" | tail -n 1)
  if [ -z "$executions" ]; then  # no final stats (killed): the last status line's #N
    executions=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  fi
  mapfile -t crashes < <(find "$findings" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
                                                    -o -name 'oom-*' -o -name 'deadly-*' \) | sort)
  if [ "$code" -ne 0 ] && [ "${#crashes[@]}" -eq 0 ]; then
    tail -n 30 "$log" >&2
    echo "ci/fuzz.sh: FAIL: $t exited with $code and left no input (log: ${log#"$repo"/})" >&2
    failed=1
  fi
  [ "${#crashes[@]}" -gt 0 ] && failed=1
  paths=$(printf '%s\n' "${crashes[@]+"${crashes[@]}"}" | sed "s|^$repo/||" | paste -sd '|')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$elapsed" "${executions:-0}" "${#crashes[@]}" "$paths" "$code" >>"$results"
  printf 'ci/fuzz.sh: %-18s %4d s %10s runs  %d crash(es)%s\n' "$t" "$elapsed" "${executions:-0}" "${#crashes[@]}" \
    "$([ "${#crashes[@]}" -gt 0 ] && echo ": ${paths//|/ }")"
done

if [ -n "$out_json" ]; then
  clang_version=$(clang++ --version | head -n 1)
  PYTHONPATH="$repo/ci/lib" python3 - "$results" "$out_json" "$seconds" "$commit" "$dirty" "$clang_version" "$build_s" "$replayed" "$runs_bound" <<'EOF'
import datetime, sys
from results_file import write_json_atomically
results, out, seconds, commit, dirty, clang, build_s, replayed, runs_bound = sys.argv[1:10]
targets = []
for line in open(results):
    name, elapsed, executions, crashes, paths, code = line.rstrip("\n").split("\t")
    targets.append({"name": name, "seconds": int(elapsed), "executions": int(executions),
                    "crashes": int(crashes), "crash_inputs": [p for p in paths.split("|") if p],
                    "exit_code": int(code)})
doc = {"format": "fsdpp.fuzz-run", "version": 1,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "commit": commit, "dirty": dirty == "true", "compiler": clang,
       "seconds_per_target": int(seconds), "runs_bound": int(runs_bound), "build_seconds": int(build_s), "regression_inputs_replayed": int(replayed),
       "targets": targets,
       "total_executions": sum(t["executions"] for t in targets),
       "total_crashes": sum(t["crashes"] for t in targets)}
write_json_atomically(out, doc)
EOF
  echo "ci/fuzz.sh: wrote ${out_json}"
fi

if [ "$failed" -ne 0 ]; then
  echo "ci/fuzz.sh: FAIL: crashes found (inputs under build-fuzz/findings/; suites/fuzz/README.md: reproducing)" >&2
  exit 1
fi
echo "ci/fuzz.sh: ok: no crashes"
