#!/usr/bin/env bash
# Runs clang-tidy with the repository's .clang-tidy on fsdpp's C++ sources and fails on any
# finding (every check is an error). ctest's lint.tidy runs it with no arguments.
#
#   ci/lint/tidy.sh                the .cpp files changed against the base (below), at most
#                                  $FSDPP_TIDY_MAX_FILES (default 12) of them
#   ci/lint/tidy.sh --all          every source in the build's compile database
#   ci/lint/tidy.sh FILE...        these sources
#   ci/lint/tidy.sh --list ...     print the sources it would check, and stop
# Options: --build DIR  the build folder whose compile_commands.json to read (default
#                       <repo>/build; every preset exports one)
#          --db DIR     use DIR/compile_commands.json as it is (one entry per source)
#          --base REV   compare against REV instead of the default base
#
# Why not the whole tree by default: clang-tidy parses LibTorch's headers for every file,
# tens of seconds of CPU each, so ~200 sources take longer on two cores than the whole CI
# run (figures: docs/notes/2026-11-28-comments-moved.md).
#
# The base: $FSDPP_LINT_BASE when set; else `git merge-base HEAD origin/main` when the clone
# has that remote branch and HEAD is not on it (a pull request: all of its changes); else
# HEAD~1 (a clone of main, whose HEAD is origin/main or one of its commits: the last
# commit's changes, which a merge base of HEAD itself would leave empty). Changed means
# changed between the base and the working tree, so uncommitted edits count. A changed header counts as the .cpp of the same name beside
# it, which includes it (the header's findings are reported through it). A clone with a
# single commit and no origin/main has no base: the check says so and exits 77 (ctest:
# skipped), never passes silently.
#
# The build is a unity build, so its compile database names unity_*.cxx batches:
# ci/lint/compile_db.py derives one entry per source from it, into <build>/lint/.
# Exit: 0 no finding; 1 a finding, a file clang-tidy cannot compile, or a tool missing;
# 2 bad usage; 77 nothing to compare against.
set -euo pipefail
# shellcheck source=ci/lint/tools.sh
source "$(dirname "$0")/tools.sh"
lint_need clang-tidy "Debian package clang-tidy"
repo=$lint_repo
me=ci/lint/tidy.sh
build=$repo/build
db=""
base=${FSDPP_LINT_BASE:-}
all=0
list=0
files=()
while (($#)); do
  case "$1" in
    --all) all=1 ;;
    --list) list=1 ;;
    --build) build=${2:?"$me: --build needs a folder"}; shift ;;
    --db) db=${2:?"$me: --db needs a folder"}; shift ;;
    --base) base=${2:?"$me: --base needs a revision"}; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "$me: unknown option $1 (expected --all, --list, --build DIR, --db DIR, --base REV or files)" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done

if [ -z "$db" ]; then
  db=$build/lint
  python3 "$repo/ci/lint/compile_db.py" "$build" "$db"
fi
[ -f "$db/compile_commands.json" ] || { echo "$me: $db/compile_commands.json: no such file" >&2; exit 1; }
# The sources the database compiles, absolute.
mapfile -t known < <(python3 -c 'import json, sys; [print(e["file"]) for e in json.load(open(sys.argv[1]))]' \
                     "$db/compile_commands.json")
in_db() { local k; for k in "${known[@]}"; do [ "$k" = "$1" ] && return 0; done; return 1; }
generated() { head -n 3 "$1" | grep -q GENERATED; }

if ((all)); then
  for k in "${known[@]}"; do
    case "$k" in "$repo"/core/*|"$repo"/harness/*|"$repo"/suites/*) generated "$k" || files+=("$k") ;; esac
  done
elif ((${#files[@]} == 0)); then
  cd "$repo"
  if [ -z "$base" ]; then
    fork=""
    git rev-parse -q --verify origin/main >/dev/null && fork=$(git merge-base HEAD origin/main)
    if [ -n "$fork" ] && [ "$fork" != "$(git rev-parse HEAD)" ]; then
      base=$fork
    elif git rev-parse -q --verify HEAD~1 >/dev/null; then
      base=HEAD~1
    else
      echo "$me: SKIPPED: no base to compare against (no origin/main, and HEAD has no parent); set FSDPP_LINT_BASE or run with --all"
      exit 77
    fi
  fi
  git rev-parse -q --verify "$base^{commit}" >/dev/null || { echo "$me: --base $base: not a commit of this clone" >&2; exit 2; }
  # Not CUDA sources (.cu): clang-tidy 14's CUDA front end cannot read CUDA 13's headers
  # (texture_fetch_functions.h is gone); core/CMakeLists.txt compiles them with warnings as errors.
  mapfile -t changed < <(git diff --name-only --diff-filter=ACMR "$base" -- '*.cpp' '*.cc' '*.h' '*.hpp'
                         git ls-files --others --exclude-standard -- '*.cpp' '*.cc')
  declare -A chosen=()
  for f in "${changed[@]}"; do
    [ -n "$f" ] || continue
    source_file=$repo/$f
    case "$f" in *.h|*.hpp|*.cuh) source_file=$repo/${f%.*}.cpp ;; esac
    if in_db "$source_file" && ! generated "$source_file"; then chosen[$source_file]=1; fi
  done
  mapfile -t files < <(printf '%s\n' "${!chosen[@]}" | sed '/^$/d' | sort)
  limit=${FSDPP_TIDY_MAX_FILES:-12}
  echo "$me: ${#files[@]} source(s) changed against $(git rev-parse --short "$base") ($base)"
  if ((${#files[@]} > limit)); then
    echo "$me: checking the first $limit of them (FSDPP_TIDY_MAX_FILES); bash $me --all checks every source"
    files=("${files[@]:0:limit}")
  fi
fi
if ((${#files[@]} == 0)); then
  echo "$me: no C++ source to check"
  exit 0
fi
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "$me: $f: no such file" >&2; exit 1; }
done
if ((list)); then
  printf '%s\n' "${files[@]}"
  exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
# One clang-tidy per file, as many at once as ctest's jobs (2 on CI); each writes its own log.
printf '%s\0' "${files[@]}" |
  xargs -0 -P "${FSDPP_LINT_JOBS:-2}" -I{} sh -c \
    'log="$1/$(echo "$2" | tr / _).log"; clang-tidy -p "$3" --config-file="$4/.clang-tidy" \
       --header-filter="^$4/(core|harness|suites)/" --quiet "$2" >"$log" 2>&1 || echo "$2" >>"$1/failed"' \
    sh "$out" {} "$db" "$repo"
findings=$(cat "$out"/*.log | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ' | sort -u || true)
seconds=$(($(date +%s) - start))
if [ -n "$findings" ] || [ -f "$out/failed" ]; then
  [ -n "$findings" ] && echo "$findings"
  if [ -z "$findings" ]; then cat "$out"/*.log | tail -n 20; fi
  echo "$me: $(grep -c . <<<"$findings") finding(s) in ${#files[@]} source(s) (${seconds} s); fix them or" \
    "suppress one with // NOLINT(check-name) and the reason"
  exit 1
fi
echo "$me: ${#files[@]} source(s) clean (${seconds} s)"
