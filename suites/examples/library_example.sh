#!/usr/bin/env bash
# fsdpp as a library, as a user meets it (README.md, "Use it as a library"): installs the
# build to a fresh prefix, then configures examples/library as a project of its own with
# find_package(fsdpp) against that prefix and LibTorch's CMake folder, builds it, and runs
#   1. its train program (README.md's example, checked to be the same code) on 2 ranks, one
#      process each, the world from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, both exiting 0;
#   2. its check_equivalence program (written against fsdpp::harness), which trains its own
#      model sharded on 2 ranks and unsharded and compares them, in tolerance and bit for bit;
#   3. the installed fsdpp binary (`fsdpp --version`: it finds LibTorch from the prefix).
# Any failure fails the test, with the step's log.
# Usage: library_example.sh BUILD WORK PREFIX_PATH PYTHON [CMAKE_CONFIGURE_ARG...]
#   BUILD        fsdpp's build folder (its libraries and fsdpp built)
#   WORK         a scratch folder, emptied first: WORK/prefix, WORK/build, logs
#   PREFIX_PATH  the prefixes fsdpp was built with (LibTorch's CMake folder), ':'-separated
#   PYTHON       a Python, to find a free port
# The configure arguments are the build's (generator, compiler, launcher, build type).
set -euo pipefail
build=$1 work=$2 prefix_path=$3 python=$4
shift 4
repo=$(cd "$(dirname "$0")/../.." && pwd)
example=$repo/examples/library
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

step() {  # NAME LOG COMMAND...: runs COMMAND with its output in LOG; on failure shows LOG and exits 1
  local name=$1 log=$2 start=$SECONDS
  shift 2
  if "$@" >"$log" 2>&1; then
    echo "ok: $name ($((SECONDS - start)) s)"
  else
    local rc=$?
    tail -n 60 "$log"
    echo "FAILED: $name (exit $rc; log: $log)"
    exit 1
  fi
}

# The README's C++ and CMake blocks of "Use it as a library" are the example's code.
readme_blocks_in_example() {
  "$python" - "$repo/README.md" "$example" <<'EOF'
import pathlib, re, sys
readme, example = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2])
section = readme.split("## Use it as a library", 1)[1].split("\n## ", 1)[0]
blocks = re.findall(r"^```(cpp|cmake)\n(.*?)^```$", section, re.S | re.M)
files = {"cpp": example / "train.cpp", "cmake": example / "CMakeLists.txt"}
missing = [lang for lang, text in blocks if text not in files[lang].read_text()]
print(f"{len(blocks)} block(s): {[lang for lang, _ in blocks]}")
if sorted({lang for lang, _ in blocks}) != ["cmake", "cpp"] or missing:
    sys.exit(f"README.md's library blocks {missing or 'cpp and cmake'} are not in {example} verbatim")
EOF
}
step "README.md's library example is examples/library's code" "$work/readme.log" readme_blocks_in_example

step "cmake --install $build --prefix $prefix" "$work/install.log" cmake --install "$build" --prefix "$prefix"
for f in include/core/fsdp/sharded_model.h include/harness/equiv/equivalence.h lib/libfsdpp_core.a \
         lib/libfsdpp_harness.a bin/fsdpp lib/cmake/fsdpp/fsdppConfig.cmake lib/cmake/fsdpp/fsdppConfigVersion.cmake; do
  [ -e "$prefix/$f" ] || { echo "FAILED: the install has no $f"; exit 1; }
done
step "the installed fsdpp runs" "$work/version.log" "$prefix/bin/fsdpp" --version

step "configure examples/library with find_package(fsdpp)" "$work/configure.log" \
  cmake -S "$example" -B "$work/build" "-DCMAKE_PREFIX_PATH=$prefix;${prefix_path//:/;}" "$@"
step "build examples/library" "$work/build.log" cmake --build "$work/build" --parallel 2

# train on 2 ranks, a process each: both must exit 0 (10 steps, then a clean shutdown).
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
train_two_ranks() {
  local pids=() rc=0 r
  for r in 0 1; do
    OMP_NUM_THREADS=1 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$port timeout 120 "$work/build/train" >"$work/train.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}" || { rc=$?; echo "rank $r exited $rc"; }
  done
  cat "$work/train.rank0.log" "$work/train.rank1.log"
  return "$rc"
}
step "train (README.md's example) on 2 ranks" "$work/train.log" train_two_ranks

check_equivalence() {
  OMP_NUM_THREADS=1 timeout 300 "$work/build/check_equivalence" &&
    [ "$(grep -c '^check_equivalence: 2-rank FULL_SHARD training equals unsharded training' "$work/equiv.log")" -eq 2 ]
}
step "check_equivalence (fsdpp::harness) on 2 ranks" "$work/equiv.log" check_equivalence
grep '^check_equivalence:' "$work/equiv.log"
