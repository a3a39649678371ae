#!/usr/bin/env bash
# Prints the tracked C, C++ and CUDA sources and headers that fsdpp's format applies to, one
# per line, relative to the repository root: every one except generated files (those whose
# first three lines say "GENERATED", such as core/tokenizer/unicode_ranges.cpp), which stay
# as their generator writes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
git ls-files -- '*.c' '*.cc' '*.cpp' '*.cxx' '*.h' '*.hpp' '*.cu' '*.cuh' |
  while IFS= read -r f; do
    [ -f "$f" ] || continue  # deleted in the working tree
    head -n 3 "$f" | grep -q 'GENERATED' || printf '%s\n' "$f"
  done
