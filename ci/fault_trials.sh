#!/usr/bin/env bash
# Fault trials of `fsdpp train` (issue 27): rank death, crash during save, disk full and
# checkpoint corruption, against the real CLI on a tiny model. Writes one JSON document,
# format "fsdpp.fault-trials" version 1 (ci/fault_trials/README.md).
#
#   ci/fault_trials.sh [--trials N] [--quick] [--only CATEGORIES] [--fsdpp BIN] [--seed S]
#                      [--timeout-s S] [--margin-s S] [--work DIR] [--keep-work] [OUT_JSON]
#
#   --trials N   rank-death and crash-during-save trials each (default 100)
#   --quick      6 trials each and fewer disk-full cases (a few minutes)
#   --only       comma-separated: rank_death,crash_during_save,disk_full,corruption
#   OUT_JSON     default results/reliability/fault-trials-YYYYMMDD.json
#
# The binary (default build/fsdpp) is copied into the scratch folder first, so a rebuild
# while the trials run does not change what they test. Disk-full trials mount a tmpfs
# (root); failed trials keep their folders and logs (their paths are in the JSON).
# Exit status: 0 every target met, 1 a target missed, 2 usage or setup error.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
python="$here/.venv/bin/python"
[ -x "$python" ] || python=$(command -v python3) || { echo "ci/fault_trials.sh: no python3" >&2; exit 2; }
exec "$python" "$here/ci/fault_trials/fault_trials.py" "$@"
