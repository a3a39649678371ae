#!/usr/bin/env bash
# Runs the readers', the communicator's and the other cheap suites under AddressSanitizer,
# LeakSanitizer and UndefinedBehaviorSanitizer (ci/sanitize/README.md): configures the "asan"
# preset into build-asan, builds only the test binaries it runs, runs each binary once with
# leak checking on, counts the sanitizers' reports (every process's, forked ranks and CLI
# children included), and writes the run's figures to OUT_JSON atomically (format
# "fsdpp.sanitize-run" version 1, specified in ci/sanitize/README.md).
#
#   ci/sanitize.sh [OUT_JSON]     (default results/reliability/sanitize-<UTC time>.json)
#   FSDPP_SANITIZE_SUITES="comm_tests data_tests" ci/sanitize.sh /tmp/s.json   (a subset)
#
# Environment: FSDPP_JOBS (compile jobs, default 2), FSDPP_TORCH_PYTHON (the Python whose
# torch to build against, default .venv), FSDPP_SANITIZE_TIMEOUT (seconds per suite, default
# 3600), FSDPP_ASSETS_DIR (as for the suites). Everything runs under nice.
# Exit: 0 when every test passed (or skipped) and there were 0 sanitizer reports; 1 when a
# test failed or a sanitizer reported; 2 on bad usage or set-up errors (one line each).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$repo/build-asan
die() { echo "ci/sanitize.sh: $*" >&2; exit 2; }

[ $# -le 1 ] || die "usage: ci/sanitize.sh [OUT_JSON]"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out_json=${1:-$repo/results/reliability/sanitize-$stamp.json}
case $out_json in /*) ;; *) out_json=$PWD/$out_json ;; esac

# The suites, in the order they run. Readers: safetensors + HF config (safetensors_tests),
# YAML/JSON + token data + data prepare (data_tests), tokenizers (tokenizer_tests),
# checkpoint index/reader/writer (checkpoint_tests), results documents (results_tests); the
# communicator (comm_tests); then the optimizers (train_tests) and the launcher, failure
# handling and CLI commands (harness_tests).
all_suites=(comm_tests safetensors_tests data_tests tokenizer_tests checkpoint_tests results_tests train_tests
            harness_tests)
# Tests left out, one line each: SUITE|GTEST_NEGATIVE_PATTERN|REASON (no '|', '=' or ';').
# ASan replaces glibc's malloc, and its mallopt() is a stub that refuses every setting.
exclusions=(
  "harness_tests|HostMemory.AKeptLargeBlockIsReusedWithoutPageFaultingItInAgain|it measures glibc malloc's mmap and trim thresholds, which ASan's allocator replaces (its mallopt refuses them)"
  "harness_tests|TrainCommand.FineTuningOnARealCorpusLowersHeldOutPerplexityAndExportsAnHfFolder|time: about 200 s under ASan, a fifth of the whole run, for code (train, checkpoint, export) that the other TrainCommand tests run too"
)

read -r -a suites <<<"${FSDPP_SANITIZE_SUITES:-${all_suites[*]}}"
[ "${#suites[@]}" -gt 0 ] || die "FSDPP_SANITIZE_SUITES names no suite"
for s in "${suites[@]}"; do
  [[ " ${all_suites[*]} " == *" $s "* ]] || die "unknown suite '$s' in FSDPP_SANITIZE_SUITES (known: ${all_suites[*]})"
done
timeout_s=${FSDPP_SANITIZE_TIMEOUT:-3600}
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die "FSDPP_SANITIZE_TIMEOUT must be a positive integer, got '$timeout_s'"
jobs=${FSDPP_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "FSDPP_JOBS must be a positive integer, got '$jobs'"

python=${FSDPP_TORCH_PYTHON:-$repo/.venv/bin/python}
[ -x "$(command -v "$python" || true)" ] || die "no Python at $python (run bash ci/setup.sh)"
torch_cmake=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  die "$python cannot import torch (run bash ci/setup.sh)"
command -v cmake >/dev/null && command -v ninja >/dev/null || die "cmake and ninja are needed"
command -v python3 >/dev/null || die "python3 is needed to write the run's JSON"
cxx=$(command -v c++ || true)
[ -n "$cxx" ] || die "no C++ compiler (c++) on PATH"
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf 'int main() { return 0; }\n' >"$probe/probe.cpp"
"$cxx" -fsanitize=address,undefined "$probe/probe.cpp" -o "$probe/probe" 2>"$probe/log" ||
  die "$cxx cannot link an ASan+UBSan program (libasan/libubsan missing?): $(head -c 300 "$probe/log")"
if [[ " ${suites[*]} " == *" tokenizer_tests "* || " ${suites[*]} " == *" data_tests "* ]]; then
  assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
  [ -d "$assets/gpt2" ] || die "the tokenizer and data suites need the assets in $assets: run bash ci/fetch_assets.sh"
fi

# 1. Configure and build (ccache when installed, as ci/build.sh).
source "$repo/ci/lib/ccache.sh"  # sets `launcher`
mkdir -p "$build"
build_start=$(date +%s)
(cd "$repo" && nice -n 10 cmake --preset asan -DCMAKE_PREFIX_PATH="$torch_cmake" "${launcher[@]}") \
  >"$build/configure.log" 2>&1 || { tail -n 30 "$build/configure.log" >&2; die "configuring build-asan failed (log: build-asan/configure.log)"; }
targets=("${suites[@]}")
# results_tests and harness_tests run the CLI, which is then the instrumented one too.
[[ " ${suites[*]} " == *" results_tests "* || " ${suites[*]} " == *" harness_tests "* ]] && targets+=(fsdpp)
nice -n 10 cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
  { grep -E "error|FAILED" "$build/build.log" | head -n 20 >&2; die "building build-asan failed (log: build-asan/build.log)"; }
build_s=$(( $(date +%s) - build_start ))
compiler=$("$cxx" --version | head -n 1)
compile_flags=$(sed -n 's/^CMAKE_CXX_FLAGS_RELWITHDEBINFO:STRING=//p' "$build/CMakeCache.txt")
sanitizers=$(sed -n 's/^FSDPP_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
echo "ci/sanitize.sh: built ${targets[*]} in ${build_s} s ($compiler; -fsanitize=$sanitizers $compile_flags)"

# 2. The sanitizers' options. Every report goes to a file under the suite's log folder
# (log_path: one file per reporting process, so that reports from forked ranks and from CLI
# children, whose output the tests capture, are counted as well).
#   detect_leaks=1                 LeakSanitizer at every instrumented process's normal exit.
#   check_initialization_order=1   static-initialisation-order bugs between fsdpp's globals.
#   detect_stack_use_after_return=1  use of a returned function's stack (fake stacks).
#   halt_on_error=1 (UBSan)        as -fno-sanitize-recover=undefined: the first report ends it.
#   exitcode=86                    a process a sanitizer stopped exits 86, which no fsdpp
#                                  command uses: a test that runs the CLI and expects its
#                                  error exit (1, 2) sees the difference.
# gcc links UBSan's runtime (libubsan) apart from ASan's, and libubsan beside libasan writes
# to stderr whatever log_path says: UBSan's reports are read from the suite's output, where
# the launcher relays every rank's (a CLI child's output is the test's to show; its exit
# status 86 fails the test).
# No option weakens a check: libstdc++'s container annotations are off unless
# _GLIBCXX_SANITIZE_VECTOR is defined, so mixing with uninstrumented LibTorch raises no false
# container-overflow reports, and LibTorch is not instrumented, so it has no ASan globals
# (no false ODR reports).
asan_common="detect_leaks=1:check_initialization_order=1:detect_stack_use_after_return=1:exitcode=86"
# One suppressions file for both (clang's single runtime has one "suppressions" flag, which
# LSAN_OPTIONS and UBSAN_OPTIONS would both set: they must agree).
supp=$repo/ci/sanitize/suppressions.supp
lsan_common="suppressions=$supp:print_suppressions=1"
ubsan_common="print_stacktrace=1:halt_on_error=1:exitcode=86:suppressions=$supp"

logs=$build/sanitize-logs
rm -rf "$logs"
mkdir -p "$logs"
results=$probe/results.tsv
: >"$results"
failed=0
for s in "${suites[@]}"; do
  exe=$build/suites/$s
  [ -x "$exe" ] || die "$exe was not built"
  negative=""
  excluded=""
  for e in "${exclusions[@]+"${exclusions[@]}"}"; do
    IFS='|' read -r e_suite e_pattern e_reason <<<"$e"
    [ "$e_suite" = "$s" ] || continue
    negative+="${negative:+:}$e_pattern"
    excluded+="${excluded:+;}$e_pattern=$e_reason"
  done
  filter="*${negative:+-$negative}"
  listed=$(ASAN_OPTIONS=detect_leaks=0 "$exe" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ' || true)
  mkdir -p "$logs/$s"
  log=$logs/$s.log
  start=$(date +%s)
  set +e
  # ctest's working directory for the suites (build-asan/suites); the one log_path in both
  # option sets, as for the suppressions.
  (cd "$build/suites" && ASAN_OPTIONS="$asan_common:log_path=$logs/$s/report" LSAN_OPTIONS="$lsan_common" \
     UBSAN_OPTIONS="$ubsan_common:log_path=$logs/$s/report" \
     nice -n 10 timeout -k 30 "$timeout_s" "$exe" --gtest_filter="$filter") >"$log" 2>&1
  code=$?
  set -e
  elapsed=$(( $(date +%s) - start ))
  # Per test: gtest's "[ RUN      ]" line, then "[       OK ]", "[  SKIPPED ]" or
  # "[  FAILED  ]" with "(N ms)"; a test that started and never ended (the process died) failed.
  ran=$(grep -c '^\[ RUN      \] ' "$log" || true)
  passed=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$log" || true)
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log" || true)
  fails=$(( ran - passed - skipped ))
  shopt -s nullglob
  report_files=("$logs/$s"/*)
  shopt -u nullglob
  count() { cat "$log" "${report_files[@]+"${report_files[@]}"}" | grep -cE "$1" || true; }
  asan=$(count '^==[0-9]+==ERROR: AddressSanitizer')
  lsan=$(count '^(Direct|Indirect) leak of [0-9]+ byte')
  # UBSan: distinct reports (place and message), as the launcher repeats a failed rank's
  # last output in its summary.
  ubsan=$( { cat "$log" "${report_files[@]+"${report_files[@]}"}" | grep -oE '[^ |]+:[0-9]+:[0-9]+: runtime error: .*' ||
             true; } | sort -u | wc -l)
  suppressed=$(cat "${report_files[@]+"${report_files[@]}"}" /dev/null |
               awk '/^Suppressions used:/ { on = 1; next } on && /^-+$/ { on = 0 } on && $1 ~ /^[0-9]+$/ { n += $1 } END { print n + 0 }')
  # A file under log_path that holds no report we count (a crash of the runtime itself, a
  # report kind not listed above) is still a report.
  other=0
  for f in "${report_files[@]+"${report_files[@]}"}"; do
    if ! grep -qE '^==[0-9]+==ERROR: AddressSanitizer|^(Direct|Indirect) leak of|runtime error: |^Suppressions used:' "$f"; then
      other=$((other + 1))
    fi
  done
  reports=$((asan + lsan + ubsan + other))
  files=$(printf '%s\n' "${report_files[@]+"${report_files[@]}"}" | sed "s|^$repo/||" | paste -sd '|')
  verdict=ok
  if [ "$code" -ne 0 ] || [ "$fails" -ne 0 ] || [ "$reports" -ne 0 ] || [ "$ran" -ne "$listed" ]; then
    verdict=FAIL
    failed=1
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$s" "$listed" "$ran" "$passed" "$skipped" "$fails" \
    "$code" "$elapsed" "$asan" "$lsan" "$ubsan" "$other" "$suppressed" "$files" "$excluded" >>"$results"
  printf 'ci/sanitize.sh: %-18s %4d s  %3d run, %3d passed, %2d skipped, %d failed, exit %d, %d report(s) (ASan %d, LSan %d, UBSan %d, other %d; %d leak(s) suppressed)  %s\n' \
    "$s" "$elapsed" "$ran" "$passed" "$skipped" "$fails" "$code" "$reports" "$asan" "$lsan" "$ubsan" "$other" "$suppressed" "$verdict"
  if [ "$verdict" = FAIL ]; then
    grep -E '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log" | head -n 10 >&2 || true
    for f in "${report_files[@]+"${report_files[@]}"}"; do
      grep -qE '^Suppressions used:' "$f" && ! grep -qE 'ERROR: |runtime error: ' "$f" && continue
      echo "---- ${f#"$repo"/} (first 40 lines)" >&2
      head -n 40 "$f" >&2
    done
    if [ "$ubsan" -gt 0 ]; then
      echo "---- the first UBSan report in ${log#"$repo"/}" >&2
      grep -m 1 -A 12 'runtime error: ' "$log" >&2 || true
    fi
    echo "ci/sanitize.sh: $s: output in ${log#"$repo"/}" >&2
  fi
done

# 3. The run's document, written atomically (a reader never sees half of it).
commit=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
# (Not `git status | grep -q`: under pipefail, grep's early exit makes git's SIGPIPE the status.)
dirty=false
[ -n "$(git -C "$repo" status --porcelain 2>/dev/null)" ] && dirty=true
PYTHONPATH="$repo/ci/lib" python3 - "$results" "$out_json" "$commit" "$dirty" "$compiler" "$sanitizers" "$compile_flags" "$build_s" \
  "$asan_common" "$lsan_common" "$ubsan_common" "$repo" <<'EOF'
import datetime, sys
from results_file import write_json_atomically
(results, out, commit, dirty, compiler, sanitizers, flags, build_s,
 asan_opts, lsan_opts, ubsan_opts, repo) = sys.argv[1:13]
def rel(text):
    return text.replace(repo + "/", "")
suites = []
for line in open(results):
    (name, listed, ran, passed, skipped, failed, code, seconds, asan, lsan, ubsan, other, suppressed,
     files, excluded) = line.rstrip("\n").split("\t")
    reports = {"asan": int(asan), "lsan": int(lsan), "ubsan": int(ubsan), "other": int(other)}
    suites.append({
        "name": name, "tests_listed": int(listed), "tests_run": int(ran), "tests_passed": int(passed),
        "tests_skipped": int(skipped), "tests_failed": int(failed), "exit_code": int(code),
        "seconds": int(seconds), "sanitizer_reports": reports, "reports": sum(reports.values()),
        "leaks_suppressed": int(suppressed), "report_files": [f for f in files.split("|") if f],
        "excluded": [{"filter": e.split("=", 1)[0], "reason": e.split("=", 1)[1]}
                     for e in excluded.split(";") if e]})
def total(key):
    return sum(s[key] for s in suites)
totals = {"suites": len(suites), "tests_run": total("tests_run"), "tests_passed": total("tests_passed"),
          "tests_skipped": total("tests_skipped"), "tests_failed": total("tests_failed"),
          "reports": total("reports"), "leaks_suppressed": total("leaks_suppressed"),
          "test_seconds": total("seconds")}
ok = all(s["exit_code"] == 0 and s["tests_failed"] == 0 and s["reports"] == 0 and
         s["tests_run"] == s["tests_listed"] for s in suites)
doc = {"format": "fsdpp.sanitize-run", "version": 1,
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "commit": commit, "dirty": dirty == "true", "compiler": compiler,
       "sanitizers": sanitizers.split(","), "compile_flags": flags,
       "options": {"ASAN_OPTIONS": asan_opts, "LSAN_OPTIONS": rel(lsan_opts), "UBSAN_OPTIONS": rel(ubsan_opts)},
       "build_seconds": int(build_s), "suites": suites, "totals": totals, "ok": ok}
write_json_atomically(out, doc)
EOF
echo "ci/sanitize.sh: wrote ${out_json#"$repo"/}"

if [ "$failed" -ne 0 ]; then
  echo "ci/sanitize.sh: FAIL: a test failed or a sanitizer reported (reports under build-asan/sanitize-logs/)" >&2
  exit 1
fi
echo "ci/sanitize.sh: ok: every test passed, 0 sanitizer reports (build ${build_s} s)"
