#!/usr/bin/env bash
# The CUDA plugin loads into every program that links the core (core/runtime/cuda_plugin.h):
# each core symbol that libfsdpp_cuda.so leaves undefined is exported by each such program
# (fsdpp, and every suite program that holds the loader's anchor). A program that lacked one
# would fail to load the plugin on a GPU machine, and so run without CUDA; this finds it on
# any machine. Exit 77 (skipped) in a build without the plugin (a CPU-only LibTorch).
#   cuda_plugin_symbols.sh BUILD_DIR
set -uo pipefail
build=${1:?usage: cuda_plugin_symbols.sh BUILD_DIR}
plugin=$build/core/libfsdpp_cuda.so
[ -f "$plugin" ] || { echo "no $plugin: a build without CUDA"; exit 77; }
needs=$(mktemp) has=$(mktemp)
trap 'rm -f "$needs" "$has"' EXIT
nm -D --undefined-only "$plugin" | awk '{print $2}' | grep -E '^_Z[A-Z]*N5fsdpp' | sort -u >"$needs"
# Never vacuous: the plugin registers itself through the core.
grep -q "register_cuda_plugin" "$needs" || { echo "FAIL: $plugin does not call register_cuda_plugin"; exit 1; }
checked=0 failed=0
for program in "$build/fsdpp" "$build"/suites/*; do
  [ -f "$program" ] && [ -x "$program" ] || continue
  nm -D --defined-only "$program" 2>/dev/null | awk '{print $3}' | sort -u >"$has"
  grep -qx fsdpp_cuda_plugin_anchor "$has" || continue  # does not link the core
  checked=$((checked + 1))
  missing=$(comm -23 "$needs" "$has")
  if [ -n "$missing" ]; then
    echo "FAIL $(basename "$program") exports none of: $(echo "$missing" | c++filt | tr '\n' ';')"
    failed=$((failed + 1))
  fi
done
[ "$checked" -gt 1 ] || { echo "FAIL: found $checked program(s) that link the core in $build"; exit 1; }
echo "$checked programs export the $(wc -l <"$needs") core symbols the plugin needs; $failed do not"
[ "$failed" = 0 ]
