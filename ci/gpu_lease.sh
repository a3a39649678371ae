#!/usr/bin/env bash
# A short GPU lease: a borrowed GPU machine with minutes to spare, no package registry and
# no time to build. fsdpp is built here (ci/build.sh: the CUDA configuration, against the
# same PyTorch wheel the GPU machine's Python holds), packed, and run there: the CUDA
# checks in priority order, each stage under its own time cap, every result copied to OUT
# the moment it exists, so a lease cut short still leaves what finished.
#
#   ci/gpu_lease.sh pack PACK      here: the build tree without objects, the assets and the
#                                  shared libraries outside the wheel (yaml-cpp, Google
#                                  Benchmark, ...) -> PACK (.tar.xz, about 20 MB)
#   ci/gpu_lease.sh run PACK OUT   there: unpack, point the paths the build baked in
#                                  (source dir, venv Python, torch's libraries) at this
#                                  machine's, then run the stages into OUT
#
# Stages (FSDPP_LEASE_STAGES, space-separated, run in the order given; default
# "cuda bench offload tests profile"):
#   offload_profile  the Llama preset FSDPP_LEASE_OFFLOAD_PROFILE_SIZE (default 1B) with
#            CPU offload and AC on both systems, profiled -> OUT/offload-profile.md
#   cuda     the CUDA tests (ctest -R ^Cuda), then the CUDA cases of fsdp_tests and
#            harness_tests (which CPU machines skip): every GPU code path, first
#   bench    GPT-2 124M and Llama 3.2 1B at N=1, fsdpp FULL_SHARD beside PyTorch FSDP2, with
#            and without AC (fsdpp bench --preset gpu --device cuda; FSDPP_LEASE_BENCH_FILTER: other
#            cells) -> OUT/gpu.json
#   offload  Llama presets (FSDPP_LEASE_OFFLOAD_SIZES, default "7B") with CPU offload and
#            AC, fsdpp bench-step beside FSDP2 with CPUOffloadPolicy, 1+2 steps; a size runs
#            only while the host has 1.15x its AdamW state free; FSDPP_LEASE_OFFLOAD_SYSTEMS
#            (default "fsdpp fsdp2") picks the sides -> OUT/offload.tar.gz
#   tests    every other suite, -j(cores/2), each test given 2 cores, as ci/gpu.sh test;
#            left out (FSDPP_LEASE_CTEST_EXCLUDE): the CPU-only benchmark and reference
#            runs that CI runs on every commit (for time), the linters (their tools are
#            not on the image) and ci.setup_errors (it runs ci/setup.sh, which needs
#            Debian's archive)
#   profile  the Llama 1B cells without AC, both systems, profiled (FSDPP_LEASE_PROFILE_FILTER:
#            other cells) -> OUT/kernels.md
#   diag     the tiny GPT-2 offload/resident bench-step pair, repeated, deterministic and with
#            per-tensor AdamW -> OUT/diag/losses.txt
# FSDPP_LEASE_DEADLINE_S (default 560): no stage starts, and each is cut, so the whole run
# ends by then. Each stage's own cap, in seconds: FSDPP_LEASE_CUDA_CAP_S (150),
# FSDPP_LEASE_BENCH_CAP_S (240), FSDPP_LEASE_OFFLOAD_CAP_S (150, per system and size),
# FSDPP_LEASE_TESTS_CAP_S (300), FSDPP_LEASE_PROFILE_CAP_S (120). OUT also gets log.txt
# (everything printed) and lease.tar.gz (the rest).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
step=${1:-}

pack() {
  local out=${1:?ci/gpu_lease.sh pack PACK}
  local build=${FSDPP_BUILD_DIR:-$repo/build} staging
  [ -x "$build/fsdpp" ] || { echo "ci/gpu_lease.sh pack: no $build/fsdpp (run bash ci/build.sh)" >&2; exit 1; }
  staging=$(mktemp -d)
  mkdir -p "$staging/.lease/lib" "$staging/.cache"
  # Shared libraries from this system's packages that the binaries need, other than the
  # C and C++ runtimes and OpenSSL (every image has those, and the Python there too).
  find "$build" -maxdepth 2 -type f -perm -u+x -exec ldd {} \; 2>/dev/null |
    awk '$3 ~ /^\/(usr\/)?lib\/x86_64-linux-gnu\// {print $3}' |
    grep -Ev '/lib(c|m|dl|rt|pthread|util|gcc_s|stdc\+\+|crypto|ssl|z)\.so' | sort -u |
    while read -r lib; do cp -L "$lib" "$staging/.lease/lib/"; done
  cp -rL "$repo/.cache/assets" "$staging/.cache/assets"
  # Test data from Debian packages that ci/setup.sh installs here (the GPU image lacks them).
  cp -rL /usr/share/json-schema-test-suite/tests "$staging/.lease/json-schema-test-suite"
  git -C "$repo" rev-parse HEAD >"$staging/.lease/COMMIT"
  tar -C "$repo" -cf "$staging/build.tar" --exclude='*.o' --exclude='*.a' --exclude=CMakeFiles \
    --exclude=Testing "$(realpath --relative-to="$repo" "$build")"
  tar -C "$staging" -rf "$staging/build.tar" .lease .cache
  xz -6 -T0 -c "$staging/build.tar" >"$out"
  rm -rf "$staging"
  echo "ci/gpu_lease.sh pack: $out ($(du -h "$out" | cut -f1)), commit $(git -C "$repo" rev-parse --short HEAD)"
}

started=$(date +%s)
deadline=${FSDPP_LEASE_DEADLINE_S:-560}
left() { echo $((deadline - ($(date +%s) - started))); }
note() { echo "[lease +$(($(date +%s) - started))s] $*"; }
# Runs "$@" for at most min(CAP, time left) seconds; says how it ended.
capped() {
  local cap=$1 name=$2
  shift 2
  local budget
  budget=$(left)
  [ "$cap" -lt "$budget" ] && budget=$cap
  if [ "$budget" -lt 20 ]; then
    note "$name: skipped, $(left) s left"
    return 124
  fi
  note "$name: start (at most $budget s)"
  timeout -k 10 "$budget" "$@"
  local rc=$?
  note "$name: exit $rc$([ $rc -eq 124 ] && echo ' (cut at its time cap)')"
  return $rc
}

# Points the paths the build baked in at this machine's: the source dir, the venv Python
# (FSDPP_PYTHON) and the site-packages holding torch and the NVIDIA wheels (RUNPATH).
map_paths() {
  local cache=$build/CMakeCache.txt baked_src baked_python torch_dir baked_site site
  baked_src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$cache")
  if [ "$baked_src" != "$repo" ]; then
    [ -e "$baked_src" ] || { mkdir -p "$(dirname "$baked_src")" && ln -s "$repo" "$baked_src"; }
    [ "$(realpath "$baked_src")" = "$(realpath "$repo")" ] || { echo "lease: $baked_src is another tree" >&2; exit 1; }
  fi
  baked_python=$(sed -n 's/^FSDPP_PYTHON:STRING=//p' "$cache")
  if [ -n "$baked_python" ] && ! "$baked_python" -c 'import torch' 2>/dev/null; then
    mkdir -p "$(dirname "$baked_python")"
    printf '#!/bin/sh\nexec %s "$@"\n' "$python" >"$baked_python"
    chmod +x "$baked_python"
  fi
  site=$("$python" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
  torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$cache")
  baked_site=${torch_dir%/torch/share/cmake/Torch}
  if [ ! -e "$baked_site/torch" ]; then
    mkdir -p "$baked_site"
    ln -sfn "$site/torch" "$baked_site/torch"
    [ -d "$site/nvidia" ] && ln -sfn "$site/nvidia" "$baked_site/nvidia"
  fi
  local cuda_libs
  cuda_libs=$(ls -d "$site"/nvidia/*/lib 2>/dev/null | tr '\n' ':')
  export LD_LIBRARY_PATH="$site/torch/lib:${cuda_libs}$repo/.lease/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export FSDPP_ASSETS_DIR=$repo/.cache/assets
  export FSDPP_JSON_SCHEMA_TEST_SUITE=$repo/.lease/json-schema-test-suite
  export FSDPP_COMMIT=${FSDPP_COMMIT:-$(cat "$repo/.lease/COMMIT")}
}

stage_cuda() {
  FSDPP_CORES=2 OMP_NUM_THREADS=2 capped "${FSDPP_LEASE_CUDA_CAP_S:-150}" cuda \
    ctest --test-dir "$build" -j 4 --timeout 300 --output-on-failure -R '^Cuda' \
    --output-junit "$work/ctest-cuda-junit.xml"
  cp "$work/ctest-cuda-junit.xml" "$out/" 2>/dev/null
  # The CUDA cases inside the CPU suites' groups (which skip them without a GPU): the
  # gradient-only linear's cuBLAS layouts and `fsdpp train --device cuda`.
  FSDPP_CORES=2 OMP_NUM_THREADS=2 capped 120 "cuda cases in fsdp_tests" "$build/suites/fsdp_tests" \
    --gtest_filter='*GradientOnlyLinear*cuda*' --gtest_output="xml:$work/gtest-cuda-cases-fsdp.xml"
  FSDPP_CORES=2 OMP_NUM_THREADS=2 capped 180 "cuda cases in harness_tests" "$build/suites/harness_tests" \
    --gtest_filter='TrainCommand.Cuda*' --gtest_output="xml:$work/gtest-cuda-cases-cli.xml"
}

stage_tests() {
  local exclude=${FSDPP_LEASE_CTEST_EXCLUDE:-'^(Cuda|bench\.smoke|references\.hf_(models|training)|lint\.|ci\.setup_errors)'}
  FSDPP_CORES=2 OMP_NUM_THREADS=2 capped "${FSDPP_LEASE_TESTS_CAP_S:-300}" tests \
    ctest --test-dir "$build" -j "$(($(nproc) / 2))" --timeout 300 --output-on-failure -E "$exclude" \
    --output-junit "$work/ctest-junit.xml"
  cp "$work/ctest-junit.xml" "$out/" 2>/dev/null
}

stage_bench() {
  capped "${FSDPP_LEASE_BENCH_CAP_S:-240}" bench "$build/fsdpp" bench --preset gpu --device cuda --python "$python" \
    --filter "${FSDPP_LEASE_BENCH_FILTER:-^(gpt2-124M-s1024|llama-1B-s2048)/(fsdp-full_shard|pytorch_fsdp2)/bf16/n1/}" --repetitions 1 \
    --out "$work/gpu.json" --resume
  cp "$work/gpu.json" "$out/" 2>/dev/null
}

# Host memory the offloaded AdamW state needs (fp32 parameters, gradients and two moments).
offload_host_bytes() { "$build/fsdpp" model-size "$1" | awk '{print $2 * 16}'; }

# One offload cell: Llama preset SIZE with CPU offload and AC on SYSTEM (fsdpp: bench-step;
# fsdp2: torch_peer.py with CPUOffloadPolicy), 4 x 2048, bf16, 16 threads, into
# DIR/SYSTEM-SIZE.json; extra arguments go to both commands (e.g. --profile-trace FILE).
offload_cell() {
  local dir=$1 size=$2 system=$3 warmup=$4 steps=$5
  shift 5
  local shape=(--batch-size 4 --seq-len 2048 --warmup "$warmup" --steps "$steps" --mixed-precision bf16
    --activation-checkpointing --cpu-offload --seed 0 --threads "$(nproc)" --device cuda "$@")
  if [ "$system" = fsdpp ]; then
    capped "${FSDPP_LEASE_OFFLOAD_CAP_S:-150}" "offload $size fsdpp" "$build/fsdpp" bench-step --model-type llama \
      --model-size "$size" --strategy full_shard "${shape[@]}" --out "$dir/fsdpp-$size.json"
  else
    capped "${FSDPP_LEASE_OFFLOAD_CAP_S:-150}" "offload $size fsdp2" "$python" "$repo/harness/peers/torch_peer.py" \
      --mode fsdp2 --nproc 1 --model-config "$dir/configs/$size/config.json" --fixed-batch --lr 3e-4 \
      --lr-schedule constant --weight-decay 0.1 --grad-clip 1.0 --adam-impl fused "${shape[@]}" \
      --out "$dir/fsdp2-$size.json"
  fi
}

# Whether the host has 1.15x the offloaded AdamW state of SIZE free (says so when not).
# FSDPP_LEASE_HOST_BYTES: the machine's memory where /proc/meminfo reads low at first
# (virtual machines whose memory grows as it is used).
offload_fits() {
  local need avail
  need=$(offload_host_bytes "$1")
  avail=${FSDPP_LEASE_HOST_BYTES:-$(awk '/MemAvailable/ {print $2 * 1024}' /proc/meminfo)}
  if awk -v n="$need" -v a="$avail" 'BEGIN { exit !(n * 1.15 > a) }'; then
    note "offload $1: skipped, needs ~$((need / 1000000000)) GB of host memory, $((avail / 1000000000)) GB available"
    return 1
  fi
}

stage_offload() {
  local dir=$work/offload size system
  mkdir -p "$dir"
  "$build/fsdpp" model-size --config-dir "$dir/configs" >/dev/null
  for size in ${FSDPP_LEASE_OFFLOAD_SIZES:-7B}; do
    offload_fits "$size" || continue
    for system in ${FSDPP_LEASE_OFFLOAD_SYSTEMS:-fsdpp fsdp2}; do
      offload_cell "$dir" "$size" "$system" 1 2
      tar -C "$work" -czf "$out/offload.tar.gz" offload
    done
  done
}

# Where an offloaded step's time goes: the Llama preset FSDPP_LEASE_OFFLOAD_PROFILE_SIZE
# (default 1B: the same per-parameter host work as 7B at a seventh of the time) on both
# systems, one warm-up and two profiled steps each, summed by `fsdpp results profile` per
# category (host operators, kernels, copies, CUDA runtime calls) -> OUT/offload-profile.md;
# the records (phase_ms) and traces go into offload.tar.gz.
stage_offload_profile() {
  local dir=$work/offload size=${FSDPP_LEASE_OFFLOAD_PROFILE_SIZE:-1B} system category traces=()
  mkdir -p "$dir/profile"
  "$build/fsdpp" model-size --config-dir "$dir/configs" >/dev/null
  offload_fits "$size" || return 0
  ln -sfn ../configs "$dir/profile/configs"
  for system in fsdpp fsdp2; do
    offload_cell "$dir/profile" "$size" "$system" 1 2 --profile-trace "$dir/profile/$system-$size.trace.json"
    [ -f "$dir/profile/$system-$size.trace.json" ] && traces+=("$dir/profile/$system-$size.trace.json")
  done
  for category in cpu_op kernel gpu_memcpy cuda_runtime; do
    echo "## $category"
    "$build/fsdpp" results profile "${traces[@]}" --category "$category" --top 40
  done >"$out/offload-profile.md" 2>&1
  gzip -f "$dir/profile"/*.trace.json
  tar -C "$work" -czf "$out/offload.tar.gz" offload
}

# The CUDA offload-vs-resident loss gap (docs/notes/2026-11-27-gpu-h200-lease.md): the tiny
# GPT-2 bench-step pair run twice each, then with --deterministic, then with torch's
# per-tensor AdamW, so that run-to-run noise, nondeterministic kernels and the optimizer can
# be told apart.
stage_diag() {
  local dir=$out/diag variant flags rep
  mkdir -p "$dir"
  local base=(--model-type gpt2 --model-size tiny --vocab-size 256 --strategy full_shard --nproc 1 --batch-size 2
    --seq-len 32 --warmup 1 --steps 2 --mixed-precision fp32 --device cuda)
  for variant in plain deterministic per-tensor-adamw; do
    flags=()
    [ "$variant" = plain ] || flags=("--$variant")
    for rep in 1 2; do
      capped 60 "diag $variant resident $rep" "$build/fsdpp" bench-step "${base[@]}" "${flags[@]}" \
        --out "$dir/$variant-resident-$rep.json" >/dev/null
      capped 60 "diag $variant offload $rep" "$build/fsdpp" bench-step "${base[@]}" "${flags[@]}" --cpu-offload \
        --out "$dir/$variant-offload-$rep.json" >/dev/null
    done
  done
  "$python" - "$dir" <<'PY' | tee "$dir/losses.txt"
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(f.read_text())
    print(f.stem, r.get("adamw_step"), " ".join(f"{x:.9f}" for x in r["losses"]))
PY
}

stage_profile() {
  FSDPP_BUILD_DIR=$build PYTHON=$python capped "${FSDPP_LEASE_PROFILE_CAP_S:-120}" profile \
    bash "$repo/ci/gpu.sh" profile "$work" "${FSDPP_LEASE_PROFILE_FILTER:-^llama-1B-s2048/(fsdp-full_shard|pytorch_fsdp2)/bf16/n1/.*ac0}"
  cp "$work/profile/kernels.md" "$out/" 2>/dev/null
}

run() {
  local pack_file=${1:?ci/gpu_lease.sh run PACK OUT} stage
  out=${2:?ci/gpu_lease.sh run PACK OUT}
  mkdir -p "$out"
  exec > >(tee -a "$out/log.txt") 2>&1
  python=${PYTHON:-$(command -v python3)}
  work=$(mktemp -d /tmp/lease.XXXX)
  tar -C "$repo" -xJf "$pack_file" || exit 1
  build=$repo/$(tar -tJf "$pack_file" | head -1 | cut -d/ -f1)
  map_paths
  note "commit $FSDPP_COMMIT, python $python"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$python" -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
  free -g | head -2
  "$build/fsdpp" --version || { ldd "$build/fsdpp" | grep 'not found'; exit 1; }
  # On a GPU machine every program loads the CUDA plugin (core/runtime/cuda_plugin.h); without
  # it nothing below could use the GPU, so the lease stops here and says why.
  if ! "$build/fsdpp" --version | grep -q '^CUDA plugin loaded from '; then
    note "the CUDA plugin is not loaded: $("$build/fsdpp" --version | grep '^CUDA plugin')"
    ldd "$build/core/libfsdpp_cuda.so" | grep 'not found'
    exit 1
  fi
  for stage in ${FSDPP_LEASE_STAGES:-cuda bench offload tests profile}; do
    "stage_$stage"
  done
  rm -rf "$work/profile"/*.trace.json
  tar -C "$work" -czf "$out/lease.tar.gz" . 2>/dev/null
  note "done"
}

case "$step" in
  pack) pack "${2:-}" ;;
  run) run "${2:-}" "${3:-}" ;;
  *) echo "ci/gpu_lease.sh: unknown step '$step': expected pack PACK or run PACK OUT" >&2; exit 2 ;;
esac
