#!/usr/bin/env bash
# The GPU runner's entry point: builds fsdpp against the machine's CUDA LibTorch (the one
# inside the Python PyTorch), runs every suite, and runs the GPU benchmark cells beside
# PyTorch's own FSDP2. A multi-GPU CI runner calls it as it is.
#
#   ci/gpu.sh build          configure + build into $FSDPP_BUILD_DIR (default build-cuda)
#   ci/gpu.sh test           ctest, every suite; CUDA tests that need more GPUs than the
#                            machine has are reported as skipped with the reason
#   ci/gpu.sh bench OUT_DIR  the GPU benchmark (`fsdpp bench --preset gpu --device cuda`,
#                            README "GPU"): OUT_DIR/gpu.json, an fsdpp.results document;
#                            a run stopped part-way (a runner's time limit) continues when
#                            the same command runs again on the same OUT_DIR (--resume)
#   ci/gpu.sh profile OUT_DIR [FILTER]
#                            the GPU cells matching FILTER (default: Llama 1B at N=1
#                            without AC) once each, profiled: OUT_DIR/profile/*.trace.json
#                            and OUT_DIR/profile/kernels.md, fsdpp's kernels beside
#                            PyTorch's (`fsdpp results profile`); not a benchmark
#   ci/gpu.sh all OUT_DIR    build, test and bench
#
# Needs: python3 with torch (CUDA), cmake, a C++17 compiler, NCCL (the wheel's or the
# system's). Missing CLI11 / RapidCheck / gloo headers come from .deps (ci/vendor_deps.sh,
# to be run where Debian's archive is reachable and copied along).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
build=${FSDPP_BUILD_DIR:-$repo/build-cuda}
step=${1:-all}
jobs=$(nproc)

configure_and_build() {
  # The same configure path as CI (ci/build.sh); only where torch comes from differs: the
  # runner's own Python, and its GPUs' architectures.
  local extra=""
  if [ -d "$repo/.deps/usr" ]; then
    extra="$repo/.deps/usr;$repo/.deps/usr/lib/x86_64-linux-gnu/cmake;$repo/.deps/usr/share/cmake"
  fi
  FSDPP_TORCH_PYTHON="$(command -v "$python")" FSDPP_BUILD_DIR="$build" FSDPP_JOBS="$jobs" FSDPP_EXTRA_PREFIX="$extra" \
    FSDPP_WERROR=${FSDPP_WERROR:-OFF} bash "$repo/ci/build.sh" -DCMAKE_CUDA_ARCHITECTURES=native
}

run_tests() {
  # One GPU is shared by the tests that use it; CPU multi-rank suites run beside them,
  # each given 2 cores (FSDPP_CORES, OMP_NUM_THREADS) as on the 2-core CI machine:
  # without that every test sizes its thread pools for the whole machine and 8 of them
  # side by side run several times slower than one after another.
  FSDPP_CORES=2 OMP_NUM_THREADS=2 ctest --test-dir "$build" -j "$((jobs / 2))" --timeout 600 --output-on-failure \
    ${FSDPP_CTEST_ARGS:-}
}

run_bench() {
  # The PyTorch peers run on the interpreter whose torch fsdpp was built against.
  mkdir -p "$1"
  "$build/fsdpp" bench --preset gpu --device cuda --python "$(command -v "$python")" --out "$1/gpu.json" --resume
}

run_profile() {
  local dir=$1/profile filter=${2:-'^llama-1B-s2048/.*/n1.*ac0'}
  mkdir -p "$dir"
  "$build/fsdpp" bench --preset gpu --device cuda --python "$(command -v "$python")" --filter "$filter" \
    --repetitions 1 --profile-dir "$dir" --out "$dir/profiled.json"
  # fsdpp's FULL_SHARD cell first, then whatever else was profiled (FSDP2, unsharded, PyTorch).
  local traces=()
  mapfile -t traces < <(ls "$dir"/*fsdp-full_shard*.trace.json "$dir"/*.trace.json 2>/dev/null | awk '!seen[$0]++')
  [ "${#traces[@]}" -gt 0 ] || { echo "ci/gpu.sh profile: no trace written under $dir" >&2; exit 1; }
  "$build/fsdpp" results profile "${traces[@]}" --top 40 | tee "$dir/kernels.md"
}

case "$step" in
  build) configure_and_build ;;
  test) run_tests ;;
  bench) run_bench "${2:?ci/gpu.sh bench OUT_DIR}" ;;
  profile) run_profile "${2:?ci/gpu.sh profile OUT_DIR [FILTER]}" "${3:-}" ;;
  all)
    configure_and_build
    run_tests
    run_bench "${2:?ci/gpu.sh all OUT_DIR}"
    ;;
  *) echo "ci/gpu.sh: unknown step '$step': expected build, test, bench, profile or all" >&2; exit 2 ;;
esac
