#!/usr/bin/env bash
# Fingerprints what an fsdpp binary computes, so that a refactoring can show it changed no
# bit: per-step losses and gradient norms of `fsdpp train` in several configurations
# (strategies, world sizes, accumulation, clipping, fp16 loss scaling, bf16 with
# activation checkpointing and offload, --deterministic on 1 and 3 ranks, a resumed run),
# the SHA-256 of each run's exported weights, and `fsdpp equiv --deterministic`'s report
# for every strategy on 1-4 ranks. Timings are left out.
#
#   ci/same_bits.sh FSDPP_BINARY OUT_FILE
#   ci/same_bits.sh old/fsdpp /tmp/before.txt && ci/same_bits.sh build/fsdpp /tmp/after.txt &&
#     diff /tmp/before.txt /tmp/after.txt && echo "no bit changed"
# Exit: 0 when every run finished (the fingerprint is written); 1 when one failed; 2 on bad usage.
set -euo pipefail
die() { echo "ci/same_bits.sh: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: ci/same_bits.sh FSDPP_BINARY OUT_FILE"
fsdpp=$(realpath "$1")
out=$2
[ -x "$fsdpp" ] || die "$1 is not an executable fsdpp binary"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 6000 tokens of an llm.c .bin file (256 int32 header: magic 20240520, version 1, count;
# then uint16 tokens), a learnable stream over a vocabulary of 64.
python3 - "$work/tokens.bin" <<'PY'
import random, struct, sys
rng = random.Random(5)
tokens, t = [], 1
for _ in range(6000):
    t = (t * 7 + 3 + rng.randrange(3)) % 64
    tokens.append(t)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(tokens), *tokens))
PY

common="--from-scratch --model-size tiny --vocab-size 64 --seq-len 16 --batch-size 2 --max-steps 6 --lr 3e-3 --data $work/tokens.bin"
: >"$out"
run_train() {  # NAME FLAGS...
  local name=$1
  shift
  if ! "$fsdpp" train --save-dir "$work/runs" --experiment-name "$name" $common "$@" >"$work/$name.log" 2>&1; then
    tail -n 20 "$work/$name.log" >&2
    echo "ci/same_bits.sh: train run '$name' failed (flags: $*)" >&2
    exit 1
  fi
  python3 - "$work/runs/$name/metrics.jsonl" "$name" >>"$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "train":
        print(sys.argv[2], "step", r["step"], "loss", r["loss"].hex(), "grad_norm", r["grad_norm"].hex(),
              "loss_scale", float(r["loss_scale"]).hex(), "stepped", r["optimizer_step"])
PY
  echo "$name weights $(sha256sum <"$work/runs/$name/hf/model.safetensors" | cut -d' ' -f1)" >>"$out"
}

run_train fs1 --model-type gpt2
run_train fs2 --model-type gpt2 --nproc 2
run_train sgo2 --model-type opt --nproc 2 --strategy shard_grad_op --grad-accum-steps 2 --grad-clip 0.5
run_train ns2 --model-type llama --nproc 2 --strategy no_shard --grad-clip 1
run_train hyb4 --model-type gpt2 --nproc 4 --strategy hybrid_shard --hybrid-shard-size 2 --grad-accum-steps 2
run_train fp16 --model-type gpt2 --nproc 2 --mixed-precision fp16
run_train bf16 --model-type llama --nproc 2 --mixed-precision bf16 --activation-checkpointing --cpu-offload
run_train det1 --model-type gpt2 --deterministic --grad-accum-steps 3 --grad-clip 1
run_train det3 --model-type gpt2 --nproc 3 --deterministic --batch-size 2 --grad-accum-steps 1 --grad-clip 1
# A run stopped after step 3 (its checkpoint committed), then continued by the same command.
FSDPP_KILL_AFTER_STEP=3 "$fsdpp" train --save-dir "$work/runs" --experiment-name resumed $common --model-type gpt2 \
  --nproc 2 --ckpt-freq 3 >"$work/resumed-1.log" 2>&1 || true
run_train resumed --model-type gpt2 --nproc 2 --ckpt-freq 3

for strategy in full_shard shard_grad_op no_shard hybrid_shard hybrid_shard_zero2; do
  for n in 1 2 3 4; do
    extra=""
    case $strategy in hybrid_*) [ $((n % 2)) -eq 0 ] || continue; extra="--hybrid-shard-size 2" ;; esac
    if ! "$fsdpp" equiv --nproc "$n" --strategy "$strategy" $extra --deterministic --steps 10 \
         --json "$work/equiv.json" >"$work/equiv.log" 2>&1; then
      tail -n 20 "$work/equiv.log" >&2
      echo "ci/same_bits.sh: equiv --strategy $strategy --nproc $n failed" >&2
      exit 1
    fi
    # Its report, every float as its exact bits, timings left out.
    python3 - "$work/equiv.json" "equiv $strategy n$n" >>"$out" <<'PY'
import json, sys
def bits(v, path):
    if isinstance(v, dict):
        for k in sorted(v):
            if not any(t in k for t in ("ms", "time", "seconds", "date", "host", "pid")):
                yield from bits(v[k], path + "." + k)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from bits(x, "%s[%d]" % (path, i))
    else:
        yield "%s %s" % (path, v.hex() if isinstance(v, float) else json.dumps(v))
for line in bits(json.load(open(sys.argv[1])), ""):
    print(sys.argv[2], line)
PY
  done
done
echo "ci/same_bits.sh: $(wc -l <"$out") lines in $out"
