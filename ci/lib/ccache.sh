# Sourced by ci/build.sh and ci/sanitize.sh after they set $repo: when ccache is installed,
# sets up its environment for this checkout and puts the CMake flag that uses it in the
# array `launcher` (empty otherwise). Hits need the same compiler and flags; paths under
# $repo are made relative, so a second clone of the same tree hits too.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$repo" CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
  export CCACHE_COMPILERCHECK=content
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
