#!/usr/bin/env bash
# Stress trial of the Resume N1 failure seen under load on the 2.11 wheel (README, GPU):
# starts COPIES copies at once of the N=1 Resume cases (sync and async) under each
# environment variant and counts the copies that fail, so that one call tests several
# hypotheses side by side. Writes OUT_DIR/stress-resume-n1.json (fsdpp.stress-trial v1).
#
#   ci/stress_resume.sh BUILD_DIR OUT_DIR [ROUNDS] [COPIES]    (defaults: 3 rounds, 4 copies)
#
# Variants: default (FSDPP_CORES=2 OMP_NUM_THREADS=2, as the GPU suite runs), one_thread
# (1 intra-op thread per rank: is it the N=1 case's second thread?), mkl_cbwr
# (MKL_CBWR=COMPATIBLE: MKL's results independent of memory alignment and code path: is it
# the resumed run's differently aligned tensors?). Each copy's log is kept under
# OUT_DIR/logs.
set -euo pipefail
build=${1:?ci/stress_resume.sh BUILD_DIR OUT_DIR [ROUNDS] [COPIES]}
out=${2:?ci/stress_resume.sh BUILD_DIR OUT_DIR [ROUNDS] [COPIES]}
rounds=${3:-3}
copies=${4:-4}
tests="$build/suites/harness_tests"
[ -x "$tests" ] || { echo "ci/stress_resume.sh: $tests is not an executable (build first)" >&2; exit 2; }
filter='Strategies/Resume.AKilledRunRerunWithTheSameCommandContinuesBitwise/N1_full_shard*'
declare -A env_of=(
  [default]="FSDPP_CORES=2 OMP_NUM_THREADS=2"
  [one_thread]="FSDPP_CORES=1 OMP_NUM_THREADS=1"
  [mkl_cbwr]="FSDPP_CORES=2 OMP_NUM_THREADS=2 MKL_CBWR=COMPATIBLE"
)
mkdir -p "$out/logs"
for round in $(seq "$rounds"); do
  pids=()
  for variant in "${!env_of[@]}"; do
    for copy in $(seq "$copies"); do
      log="$out/logs/$variant-$round-$copy.log"
      # shellcheck disable=SC2086  # the variant's assignments are words
      (env ${env_of[$variant]} "$tests" --gtest_filter="$filter" >"$log" 2>&1; echo "exit=$?" >>"$log") &
      pids+=($!)
    done
  done
  wait "${pids[@]}" || true
done
python3 - "$out" "$rounds" "$copies" "$filter" <<'PY'
import glob, json, os, re, sys
out, rounds, copies, flt = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
counts = {}
for log in sorted(glob.glob(os.path.join(out, "logs", "*.log"))):
    variant = os.path.basename(log).rsplit("-", 2)[0]
    text = open(log, errors="replace").read()
    ok = re.search(r"^exit=0$", text, re.M) is not None
    c = counts.setdefault(variant, {"ok": 0, "failed": 0, "failed_cases": {}})
    c["ok" if ok else "failed"] += 1
    for case in re.findall(r"\[  FAILED  \] \S+/(N1_full_shard\w*)", text):
        c["failed_cases"][case] = c["failed_cases"].get(case, 0) + 1
doc = {"format": "fsdpp.stress-trial", "version": 1, "test": "harness_tests --gtest_filter='%s'" % flt,
       "how": "%d rounds; each starts %d copies of every variant at once" % (rounds, copies), "counts": counts}
path = os.path.join(out, "stress-resume-n1.json")
with open(path + ".tmp", "w") as f:
    json.dump(doc, f, indent=1)
os.replace(path + ".tmp", path)
print(json.dumps(counts))
PY
