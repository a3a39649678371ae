#!/usr/bin/env bash
# Checks C++ formatting against the repository's .clang-format without changing a file:
# exit 0 when every file is formatted; 1 when one is not (each such file is named with the
# first line to change and how many places differ), or clang-format is missing or fails.
# ctest's lint.format runs it; ci/format.sh fixes what it reports.
#
#   ci/lint/format_check.sh            every file ci/lint/cxx_files.sh lists
#   ci/lint/format_check.sh FILE...    these files (any path), against the same style
set -euo pipefail
# shellcheck source=ci/lint/tools.sh
source "$(dirname "$0")/tools.sh"
lint_need clang-format "Debian package clang-format"
files=("$@")
if ((${#files[@]} == 0)); then
  cd "$lint_repo"
  mapfile -t files < <(bash ci/lint/cxx_files.sh)
fi
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "ci/lint/format_check.sh: $f: no such file" >&2; exit 1; }
done
# --Werror makes each "code should be clang-formatted" note an error and a non-zero exit.
rc=0
out=$(printf '%s\0' "${files[@]}" |
      xargs -0 -n 50 clang-format --style="file:$lint_repo/.clang-format" --dry-run --Werror 2>&1) || rc=$?
unformatted=$(grep -E ': error: code should be clang-formatted' <<<"$out" |
              awk -F: '!($1 in first) {first[$1] = $2; order[++n] = $1} {count[$1]++}
                       END {for (i = 1; i <= n; i++) printf "%s:%s: %d place(s) differ\n", order[i], first[order[i]], count[order[i]]}' || true)
if [ -n "$unformatted" ]; then
  echo "$unformatted"
  echo "ci/lint/format_check.sh: $(wc -l <<<"$unformatted") of ${#files[@]} file(s) are not formatted as .clang-format says (bash ci/format.sh formats them)"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "ci/lint/format_check.sh: clang-format failed: $(head -n 1 <<<"$out")" >&2
  exit 1
fi
echo "ci/lint/format_check.sh: ${#files[@]} file(s) formatted as .clang-format says"
