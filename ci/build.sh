#!/usr/bin/env bash
# Configures and builds fsdpp (CMake preset "default"); ccache when available.
set -euo pipefail
cd "$(dirname "$0")/.."
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
  export CCACHE_COMPILERCHECK=content
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
else
  launcher=()
fi
cmake --preset default "${launcher[@]}" >/dev/null
cmake --build --preset default
