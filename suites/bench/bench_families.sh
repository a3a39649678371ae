#!/usr/bin/env bash
# bench.families: runs the families preset of the benchmark matrix for real (Qwen3 and
# Mixtral: fsdpp FULL_SHARD on 2 ranks, then PyTorch FSDP2 on 2 ranks training
# transformers' own Qwen3ForCausalLM / MixtralForCausalLM, then fsdpp's unsharded baseline)
# and checks the document it writes:
#   - every cell ran (status ok);
#   - each FSDP2 cell ran transformers' class (config.model_class) and started from fsdpp's
#     initial weights on fsdpp's batches (config.started_as_fsdpp);
#   - the same model on the same batches: at every timed step the fsdpp cell's loss equals
#     its FSDP2 peer's within torch.testing.assert_close's fp32 defaults (|a - b| <= 1e-5 +
#     1.3e-6 |b|), the bar bench.smoke's SmokeDocument tests hold the GPT-2 cells to; the
#     first timed step's pair and the largest difference are printed.
# It prints each pair's tokens/s ratio, a report of this run on this machine, not a bar.
#
# Usage: bench_families.sh FSDPP_BINARY PYTHON [OUT_DIR]
#   PYTHON: the peer's interpreter (torch, numpy, transformers). OUT_DIR keeps families.json
#   and bench.log (default: a temporary directory, removed). FSDPP_FAMILIES_REPETITIONS:
#   launches per cell (default 1).
# Exit: 0 pass, 1 a cell failed or a check did not hold, 2 usage, 77 skipped (PYTHON cannot
# import torch, numpy and transformers).
set -uo pipefail
if [ $# -lt 2 ] || [ ! -x "$1" ]; then
  echo "usage: $0 FSDPP_BINARY PYTHON [OUT_DIR]" >&2
  exit 2
fi
fsdpp=$1
python=$2
if ! "$python" -c "import torch, numpy, transformers" >/dev/null 2>&1; then
  echo "bench_families: SKIPPED: $python cannot import torch, numpy and transformers"
  exit 77
fi
if [ -n "${3:-}" ]; then
  out=$3
  mkdir -p "$out"
else
  out=$(mktemp -d "${TMPDIR:-/tmp}/bench_families.XXXXXX")
  trap 'rm -rf "$out"' EXIT
fi

start=$(date +%s)
"$fsdpp" bench --preset families --python "$python" --repetitions "${FSDPP_FAMILIES_REPETITIONS:-1}" \
  --out "$out/families.json" 2>&1 | tee "$out/bench.log"
bench_status=${PIPESTATUS[0]}
echo "bench_families: fsdpp bench exited $bench_status after $(($(date +%s) - start)) s"
if [ ! -f "$out/families.json" ]; then
  echo "bench_families: no document written" >&2
  exit 1
fi

"$python" - "$out/families.json" <<'EOF'
import json
import sys

doc = json.load(open(sys.argv[1]))
cells = {c["id"]: c for c in doc["cells"]}
failures = 0


def fail(message):
    global failures
    failures += 1
    print("FAIL " + message)


for cell_id, c in cells.items():
    if c["status"] != "ok":
        fail("%s: %s (%s)" % (cell_id, c["status"], c.get("reason", "")))
pairs = 0
for cell_id, c in cells.items():
    cfg = c["config"]
    if c["system"] != "fsdpp" or cfg["strategy"] == "unsharded" or c["status"] != "ok":
        continue
    model = cell_id.split("/")[0]
    peer_id = "%s/pytorch_fsdp2/%s/n%d/ac%d" % (
        model,
        cfg["mixed_precision"],
        cfg["world_size"],
        int(cfg["activation_checkpointing"]),
    )
    peer = cells.get(peer_id)
    if peer is None or peer["status"] != "ok":
        fail("%s: its FSDP2 peer %s did not run" % (cell_id, peer_id))
        continue
    pairs += 1
    if not str(peer["config"].get("model_class", "")).startswith("transformers "):
        fail("%s: ran %r, not transformers' class" % (peer_id, peer["config"].get("model_class")))
    if peer["config"].get("started_as_fsdpp") is not True:
        fail("%s: did not start from fsdpp's weights and batches" % peer_id)
    ours = c["samples"]["loss"]["values"]
    theirs = peer["samples"]["loss"]["values"]
    if len(ours) != len(theirs) or not ours:
        fail("%s: %d losses, its peer %d" % (cell_id, len(ours), len(theirs)))
        continue
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        worst = max(worst, abs(a - b))
        if abs(a - b) > 1e-5 + 1.3e-6 * abs(b):
            fail("%s timed step %d: loss %r, FSDP2 (transformers) %r" % (cell_id, i, a, b))
    ratio = c["metrics"]["tokens_per_s_ratio_vs_pytorch_fsdp2"]["value"]
    print(
        "%-14s fsdpp FULL_SHARD vs FSDP2 (%s): first timed loss %.7f vs %.7f, max |diff| %.2e over %d steps; "
        "tokens/s %.0f vs %.0f (%.2fx, this run)"
        % (
            model,
            peer["config"]["model_class"],
            ours[0],
            theirs[0],
            worst,
            len(ours),
            c["metrics"]["tokens_per_s"]["value"],
            peer["metrics"]["tokens_per_s"]["value"],
            ratio,
        )
    )
if pairs < 2:
    fail("%d fsdpp/FSDP2 pairs compared, expected 2 (Qwen3, Mixtral)" % pairs)
print("bench_families: %s" % ("ok" if failures == 0 else "%d failure(s)" % failures))
sys.exit(1 if failures else 0)
EOF
check_status=$?
[ "$bench_status" -eq 0 ] && [ "$check_status" -eq 0 ]
