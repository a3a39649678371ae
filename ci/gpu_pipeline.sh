#!/usr/bin/env bash
# What a multi-GPU CI runner does, stage by stage; the pipeline definitions in
# ci/pipelines/ call exactly this. Every stage is rerunnable on its own.
#
#   ci/gpu_pipeline.sh build      configure + build against the machine's CUDA LibTorch (ci/gpu.sh build)
#   ci/gpu_pipeline.sh test       every suite; tests needing more GPUs than present report SKIPPED with
#                                 the reason; JUnit into $FSDPP_OUT/ctest.xml
#   ci/gpu_pipeline.sh smoke      `fsdpp bench --preset gpu --device cuda` -> $FSDPP_OUT/smoke.json
#                                 (results schema v1, validated on write): GPT-2 124M and Llama 1B
#                                 beside PyTorch FSDP2 on as many GPUs as the cells need and the
#                                 machine has; the others are recorded unavailable with the reason
#   ci/gpu_pipeline.sh compare    regression gate (ci/gate.sh): smoke.json against the last
#                                 $FSDPP_GATE_WINDOW runs of the same machine fingerprint in $FSDPP_HISTORY,
#                                 regressed cells rerun once to confirm (Markdown + JSON into $FSDPP_OUT);
#                                 exit 1 on a confirmed regression
#   ci/gpu_pipeline.sh publish    appends smoke.json to $FSDPP_HISTORY (never rewrites) and writes the
#                                 dashboard to $FSDPP_OUT/dashboard.html
#   ci/gpu_pipeline.sh all        the five in order, publish only when compare passed (its verdict is the exit code)
#
# Environment: FSDPP_OUT (default out/), FSDPP_HISTORY (default results/history),
# FSDPP_GATE_WINDOW (default 5), FSDPP_BUILD_DIR (default build-cuda), PYTHON,
# FSDPP_BENCH_FLAGS (default "--preset gpu --device cuda --python <PYTHON's path>": what
# smoke and compare's reruns run).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${FSDPP_OUT:-$repo/out}
history=${FSDPP_HISTORY:-$repo/results/history}
window=${FSDPP_GATE_WINDOW:-5}
build=${FSDPP_BUILD_DIR:-$repo/build-cuda}
python=$(command -v "${PYTHON:-python3}" || echo "${PYTHON:-python3}")
# The PyTorch peers run on the interpreter whose torch fsdpp was built against.
bench_flags=${FSDPP_BENCH_FLAGS:---preset gpu --device cuda --python $python}
export FSDPP_BUILD_DIR=$build
fsdpp=$build/fsdpp
mkdir -p "$out"

stage_build() { "$repo/ci/gpu.sh" build; }
stage_test() { FSDPP_CTEST_ARGS="--output-junit $out/ctest.xml" "$repo/ci/gpu.sh" test; }
stage_smoke() {
  # shellcheck disable=SC2086  # the flags are words
  "$fsdpp" bench $bench_flags --out "$out/smoke.json"
}
stage_compare() {
  # The gate compares with this machine's own runs only: a history holding other machines'
  # documents (the repository's results/history on a new runner) is no baseline either.
  local fingerprint
  fingerprint=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["machine"]["fingerprint"])' \
                "$out/smoke.json") || { echo "gpu_pipeline: $out/smoke.json has no machine.fingerprint" >&2; return 2; }
  if ! compgen -G "$history/$fingerprint/*.json" >/dev/null; then
    echo "gpu_pipeline: no history for machine $fingerprint in $history yet: nothing to compare against (first run)"
    return 0
  fi
  "$repo/ci/gate.sh" --fsdpp "$fsdpp" --new "$out/smoke.json" --history "$history" --window "$window" \
    --report "$out/compare" --bench-flags "$bench_flags"
}
stage_publish() {
  "$fsdpp" results append "$out/smoke.json" --history "$history"
  "$fsdpp" results dashboard --history "$history" --out "$out/dashboard.html"
}

case "${1:-all}" in
  build) stage_build ;;
  test) stage_test ;;
  smoke) stage_smoke ;;
  compare) stage_compare ;;
  publish) stage_publish ;;
  all)
    stage_build
    stage_test
    stage_smoke
    verdict=0
    stage_compare || verdict=$?
    # A run joins the history only when the gate passed: a regression is never a baseline.
    if [ "$verdict" -eq 0 ]; then stage_publish; fi
    exit "$verdict"
    ;;
  *) echo "ci/gpu_pipeline.sh: unknown stage '$1': expected build, test, smoke, compare, publish or all" >&2; exit 2 ;;
esac
