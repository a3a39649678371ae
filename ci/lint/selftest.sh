#!/usr/bin/env bash
# Shows that each lint check fails on bad input and passes on good input, in a temporary
# folder, so that lint.format, lint.tidy and lint.ruff passing means something:
#   format  a misformatted C++ file fails ci/lint/format_check.sh; a formatted one passes
#   tidy    a use after std::move (bugprone-use-after-move) fails ci/lint/tidy.sh; a clean
#           file passes (both compiled from a one-line compile database of their own)
#   ruff    an unused import (F401) fails ci/lint/ruff_check.sh, and so does a file ruff
#           format would change; a clean file passes
#   presets a CMakePresets.json with a configure preset that does not export
#           compile_commands.json fails ci/lint/presets_check.py; the repository's passes
# Exit 0 when every expectation holds; 1 naming each that does not.
set -uo pipefail
lint=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/lint_selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

expect() {  # expect pass|fail NAME WHY COMMAND...: run COMMAND; it must pass, or fail with WHY
  local want=$1 name=$2 why=$3 rc=0  # (an extended regex) in its output
  shift 3
  "$@" >"$work/out.log" 2>&1 || rc=$?
  if { [ "$want" = pass ] && [ "$rc" -eq 0 ]; } ||
     { [ "$want" = fail ] && [ "$rc" -eq 1 ] && grep -Eq -- "$why" "$work/out.log"; }; then
    echo "ok   $name: exit $rc${why:+ (}$(grep -Eo -m1 -- "${why:-^$}" "$work/out.log" | head -n1)${why:+)}"
  else
    echo "FAIL $name: expected to $want${why:+ with /$why/}, exit $rc; its output:"
    sed 's/^/     /' "$work/out.log"
    failures=$((failures + 1))
  fi
}

# format
printf 'int  main( ){return 0;}\n' >"$work/misformatted.cpp"
printf '#include <vector>\n\nint size_of(const std::vector<int>& v) { return static_cast<int>(v.size()); }\n' \
  >"$work/formatted.cpp"
expect fail "format: misformatted.cpp" "misformatted.cpp:1: [0-9]+ place" bash "$lint/format_check.sh" "$work/misformatted.cpp"
expect pass "format: formatted.cpp" "" bash "$lint/format_check.sh" "$work/formatted.cpp"

# tidy
cat >"$work/use_after_move.cpp" <<'CPP'
#include <string>
#include <utility>

std::string keep(std::string s) { return s; }

size_t both(std::string a) {
  std::string b = keep(std::move(a));
  return a.size() + b.size();
}
CPP
cat >"$work/clean.cpp" <<'CPP'
#include <string>

size_t length_of(const std::string& s) { return s.size(); }
CPP
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
json.dump([{"directory": work, "arguments": ["c++", "-std=c++17", "-c", f], "file": f"{work}/{f}"}
           for f in ("use_after_move.cpp", "clean.cpp")], open(f"{work}/compile_commands.json", "w"))
PY
expect fail "tidy: use_after_move.cpp" "bugprone-use-after-move" bash "$lint/tidy.sh" --db "$work" "$work/use_after_move.cpp"
expect pass "tidy: clean.cpp" "" bash "$lint/tidy.sh" --db "$work" "$work/clean.cpp"

# ruff
printf 'import os\n' >"$work/unused_import.py"
printf 'x=1\n' >"$work/misformatted.py"
printf 'import os\n\nprint(os.sep)\n' >"$work/clean.py"
expect fail "ruff: unused_import.py" "F401" bash "$lint/ruff_check.sh" "$work/unused_import.py"
expect fail "ruff: misformatted.py" "would be reformatted" bash "$lint/ruff_check.sh" "$work/misformatted.py"
expect pass "ruff: clean.py" "" bash "$lint/ruff_check.sh" "$work/clean.py"

# presets
printf '{"version": 6, "configurePresets": [{"name": "plain", "binaryDir": "b"}]}\n' >"$work/CMakePresets.json"
expect fail "presets: a preset without CMAKE_EXPORT_COMPILE_COMMANDS" "preset .plain." python3 "$lint/presets_check.py" "$work/CMakePresets.json"
expect pass "presets: the repository's CMakePresets.json" "" python3 "$lint/presets_check.py"

if ((failures)); then
  echo "ci/lint/selftest.sh: $failures expectation(s) failed"
  exit 1
fi
echo "ci/lint/selftest.sh: every check fails on bad input and passes on good input"
