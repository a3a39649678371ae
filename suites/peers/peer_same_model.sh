#!/usr/bin/env bash
# Same-model proof for the PyTorch peer (harness/peers/torch_peer.py): on the same weights
# and tokens, fsdpp and the peer compute the same loss, and from the same weights they
# train to the same per-step losses (same window order, AdamW, LR schedule, clipping).
#
# Usage: peer_same_model.sh FSDPP_BINARY [PYTHON]
#   PYTHON: an interpreter with torch and numpy (default: $PEER_PYTHON, /usr/bin/python3,
#   python3 — the first that imports both); with transformers too, Qwen3 and Mixtral
#   (the peer runs transformers' own classes for them) are checked as well.
#   PEER_SCRIPT: check another copy of the peer.
# Tolerances: PEER_TOL (eval losses, default 5e-6 absolute), PEER_TRAIN_TOL (per-step
# training losses, default 2e-5 absolute: assert_close's fp32 rtol 1.3e-6 x a loss near 8 + atol 1e-5;
# measured: 9.5e-7).
# Exit: 0 all agree, 1 a mismatch or a failed command, 2 usage, 77 skipped (no Python with
# torch and numpy).
set -euo pipefail

if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "usage: $0 FSDPP_BINARY [PYTHON]   (FSDPP_BINARY must be executable)" >&2
  exit 2
fi
FSDPP=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PEER=${PEER_SCRIPT:-$ROOT/harness/peers/torch_peer.py}  # PEER_SCRIPT: another peer (to test this check)
TOL=${PEER_TOL:-5e-6}
TRAIN_TOL=${PEER_TRAIN_TOL:-2e-5}

PY=""
for candidate in "${2:-}" "${PEER_PYTHON:-}" /usr/bin/python3 python3; do
  [ -n "$candidate" ] || continue
  if "$candidate" -c "import torch, numpy" >/dev/null 2>&1; then PY=$candidate; break; fi
done
if [ -z "$PY" ]; then
  echo "peer_same_model: SKIPPED: no Python with torch and numpy (Debian: apt-get install python3-torch python3-numpy)"
  exit 77
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/peer_same_model.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# The peer's single-process calls (--export-init, --eval-loss-only, a refused flag) go to
# one peer process: ref ARG... is torch_peer.py ARG... (suites/references/serve.sh).
# Training calls start their own processes, as their ranks must.
source "$ROOT/suites/references/serve.sh"
ref_start "$WORK" "$PY" "$PEER"
export OMP_NUM_THREADS=1
failures=0

run() {  # run a command quietly (at most 300 s); on failure show its output and stop
  if ! timeout 300 "$@" >"$WORK/last.log" 2>&1; then
    echo "FAILED: $*" >&2
    cat "$WORK/last.log" >&2
    exit 1
  fi
}

run_ref() {  # run_ref ARG...: the peer's ARG... in the suite's peer process, quietly; on failure its output, and stop
  if ! ref "$@" >"$WORK/last.log" 2>&1; then
    echo "FAILED: torch_peer.py $*" >&2
    cat "$WORK/last.log" >&2
    exit 1
  fi
}

compare() {  # compare NAME A B TOL: |A - B| <= TOL
  local verdict
  verdict=$("$PY" -c "import sys; a, b, t = map(float, sys.argv[1:4]); print('ok' if abs(a - b) <= t else 'MISMATCH', '%.3g' % abs(a - b))" "$2" "$3" "$4")
  printf '%-58s fsdpp %-20s peer %-20s |diff| %s\n' "$1" "$2" "$3" "$verdict"
  case "$verdict" in ok*) ;; *) failures=$((failures + 1)) ;; esac
}

fsdpp_eval() {  # MODEL_DIR SEQ_LEN -> loss over every window of t.tok
  "$FSDPP" eval --model "$1" --data t.tok --seq-len "$2" --batch-size 8 --json 2>"$WORK/err.log" |
    "$PY" -c "import json, sys; print(repr(json.loads(sys.stdin.read().strip().splitlines()[-1])['loss']))"
}

peer_eval() {  # MODEL_DIR SEQ_LEN -> the same
  ref --eval-loss-only --weights "$1" --model-config "$1/config.json" --tokens t.tok \
    --seq-len "$2" --batch-size 8 --eval-windows 0 --device cpu --threads 1 2>"$WORK/err.log" |
    "$PY" -c "import json, sys; print(repr(json.loads(sys.stdin.read().strip().splitlines()[-1])['loss']))"
}

eval_both() {  # NAME MODEL_DIR SEQ_LEN
  local a b
  a=$(fsdpp_eval "$2" "$3") || { echo "FAILED: fsdpp eval --model $2" >&2; cat "$WORK/err.log" >&2; exit 1; }
  b=$(peer_eval "$2" "$3") || { echo "FAILED: torch_peer.py --eval-loss-only --weights $2" >&2; cat "$WORK/err.log" >&2; exit 1; }
  compare "$1" "$a" "$b" "$TOL"
}

compare_training() {  # NAME FSDPP_RUN_DIR PEER_JSON
  local pairs
  pairs=$("$PY" - "$2/metrics.jsonl" "$3" <<'EOF'
import json, sys
fsdpp = [json.loads(l) for l in open(sys.argv[1])]
fsdpp = [r["loss"] for r in fsdpp if r.get("kind") == "train"]
peer = json.load(open(sys.argv[2]))
peer = peer["warmup_losses"] + peer["losses"]
if len(fsdpp) != len(peer):
    print("steps %d %d" % (len(fsdpp), len(peer)))
for i, (a, b) in enumerate(zip(fsdpp, peer)):
    print("%d %r %r" % (i + 1, a, b))
EOF
)
  while read -r step a b; do
    if [ "$step" = steps ]; then
      echo "$1: fsdpp trained $a steps, the peer $b"; failures=$((failures + 1)); continue
    fi
    compare "$1 step $step loss" "$a" "$b" "$TRAIN_TOL"
  done <<<"$pairs"
}

# Tokens: 4097 random ids below 97 as an fsdpp token shard (core/data/TOKENS.md).
"$PY" - <<'EOF'
import struct
import numpy as np
tokens = np.random.default_rng(0).integers(0, 97, size=4097).astype("<u2")
header = b"FSDPPTOK" + struct.pack("<IIQQ", 1, 1, len(tokens), 1) + bytes(32)
open("t.tok", "wb").write(header + tokens.tobytes())
EOF

echo "peer_same_model: fsdpp $FSDPP, peer $PEER on $("$PY" -c 'import sys, torch; print("Python %d.%d, PyTorch %s" % (sys.version_info[0], sys.version_info[1], torch.__version__))')"

for model in gpt2 llama; do
  # 1. fsdpp's own model: from scratch, one step, exported as an HF folder.
  run "$FSDPP" train --from-scratch --model-type "$model" --model-size tiny --vocab-size 97 --seq-len 32 \
    --batch-size 2 --max-steps 1 --data t.tok --save-dir runs --experiment-name "$model" --threads 1
  eval_both "$model tiny, fsdpp-trained weights, eval T=32" "runs/$model/hf" 32

  # 2. Large weights (std 0.3), so that any difference in the model shows in the loss.
  run_ref --export-init "wide_$model" --model-config "runs/$model/hf/config.json" --init-std 0.3 --seed 7
  eval_both "$model tiny, std-0.3 weights, eval T=64" "wide_$model" 64

  # 3. Training from the same weights: 4 steps, shuffled windows, weight decay, clipping, cosine LR.
  train_flags=(--seq-len 32 --batch-size 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --seed 1234 --threads 1)
  run "$FSDPP" train --model "wide_$model" --data t.tok --max-steps 4 --save-dir runs \
    --experiment-name "train_$model" "${train_flags[@]}"
  run "$PY" "$PEER" --mode single --weights "wide_$model" --tokens t.tok --warmup 0 --steps 4 \
    --device cpu --out "peer_$model.json" "${train_flags[@]}"
  compare_training "$model tiny, 1 rank, train" "runs/train_$model" "peer_$model.json"
done

# 4. Llama's options: GQA (4 heads, 1 KV head), head_dim != hidden/heads, tied embeddings,
#    attention biases, Llama-3 rope scaling (short original context, so every band is used).
cat >llama_x.json <<'EOF'
{"model_type": "llama", "vocab_size": 97, "hidden_size": 24, "intermediate_size": 40,
 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
 "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
 "tie_word_embeddings": true, "attention_bias": true,
 "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}}
EOF
run_ref --export-init wide_llama_x --model-config llama_x.json --init-std 0.3 --seed 3
eval_both "llama GQA/head_dim/tied/bias/llama3-rope, eval T=128" wide_llama_x 128

# 5. Two ranks: fsdpp FULL_SHARD vs the peer's DDP (gloo), same global batch and order.
train_flags=(--seq-len 32 --batch-size 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --seed 1234 --threads 1)
run "$FSDPP" train --nproc 2 --model wide_llama --data t.tok --max-steps 3 --save-dir runs \
  --experiment-name train2_llama "${train_flags[@]}"
# --bind-cores (as `fsdpp bench` runs the peer) pins rank 0 to the first allowed CPU and
# changes no number.
run "$PY" "$PEER" --mode ddp --nproc 2 --bind-cores --weights wide_llama --tokens t.tok --warmup 0 --steps 3 \
  --device cpu --out peer2_llama.json "${train_flags[@]}"
compare_training "llama tiny, 2 ranks (FSDP / DDP), train" runs/train2_llama peer2_llama.json
if "$PY" -c 'import json, os, sys; sys.exit(json.load(open(sys.argv[1]))["cpu_affinity"] != [min(os.sched_getaffinity(0))])' \
  peer2_llama.json; then
  echo "ok   DDP --bind-cores: rank 0 ran on CPU $("$PY" -c 'import os; print(min(os.sched_getaffinity(0)))') only"
else
  echo "FAIL DDP --bind-cores: rank 0 ran on CPUs $("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["cpu_affinity"])' peer2_llama.json)"
  failures=$((failures + 1))
fi

# 6. CPU offload on both sides (the GPU offload comparison's pair): fsdpp FULL_SHARD
#    --cpu-offload vs FSDP2 with CPUOffloadPolicy, two ranks, same weights and windows.
run "$FSDPP" train --nproc 2 --cpu-offload --model wide_llama --data t.tok --max-steps 3 --save-dir runs \
  --experiment-name offload2_llama "${train_flags[@]}"
run "$PY" "$PEER" --mode fsdp2 --cpu-offload --nproc 2 --weights wide_llama --tokens t.tok --warmup 0 --steps 3 \
  --device cpu --out peer_offload2_llama.json "${train_flags[@]}"
compare_training "llama tiny, 2 ranks, CPU offload (fsdpp / FSDP2), train" runs/offload2_llama \
  peer_offload2_llama.json
if "$PY" -c 'import json, sys; sys.exit("CPUOffloadPolicy" not in json.load(open(sys.argv[1]))["precision"])' \
  peer_offload2_llama.json; then
  echo "ok   FSDP2 --cpu-offload: the record names CPUOffloadPolicy"
else
  echo "FAIL FSDP2 --cpu-offload: the record's precision does not name CPUOffloadPolicy"
  failures=$((failures + 1))
fi
if ref --mode ddp --cpu-offload --model-config wide_llama/config.json >"$WORK/ddp.log" 2>&1 ||
  ! grep -q "cpu-offload is FSDP2's CPUOffloadPolicy: it needs --mode fsdp2" "$WORK/ddp.log"; then
  echo "FAIL --mode ddp --cpu-offload: expected one line naming the flag and a non-zero exit"
  cat "$WORK/ddp.log"
  failures=$((failures + 1))
fi

# 7. The families the peer trains as transformers' own model classes (Qwen3ForCausalLM,
#    MixtralForCausalLM), skipped where the interpreter has no transformers: fsdpp's tiny
#    model scores the same eval loss in both; std-0.3 weights written by transformers'
#    save_pretrained (Mixtral's experts in the checkpoint's layout) score the same too; and
#    from them fsdpp FULL_SHARD and FSDP2 over transformers' model, 2 ranks each, train to
#    the same per-step losses (routing included: Mixtral's 4 experts, 2 per token).
if "$PY" -c "import transformers" >/dev/null 2>&1; then
  for model in qwen3 mixtral; do
    run "$FSDPP" train --from-scratch --model-type "$model" --model-size tiny --vocab-size 97 --seq-len 32 \
      --batch-size 2 --max-steps 1 --data t.tok --save-dir runs --experiment-name "$model" --threads 1
    eval_both "$model tiny (transformers' class), fsdpp-trained weights, eval T=32" "runs/$model/hf" 32
    run_ref --export-init "wide_$model" --model-config "runs/$model/hf/config.json" --init-std 0.3 --seed 7
    eval_both "$model tiny (transformers' class), std-0.3 weights, eval T=64" "wide_$model" 64
    run "$FSDPP" train --nproc 2 --model "wide_$model" --data t.tok --max-steps 3 --save-dir runs \
      --experiment-name "train2_$model" "${train_flags[@]}"
    run "$PY" "$PEER" --mode fsdp2 --nproc 2 --weights "wide_$model" --tokens t.tok --warmup 0 --steps 3 \
      --device cpu --out "peer2_$model.json" "${train_flags[@]}"
    compare_training "$model tiny, 2 ranks (FSDP / FSDP2 on transformers'), train" "runs/train2_$model" \
      "peer2_$model.json"
  done
else
  echo "skip qwen3, mixtral: $PY has no transformers (the peer trains them as transformers' model classes)"
fi

if [ "$failures" -ne 0 ]; then
  echo "peer_same_model: $failures mismatch(es)"
  exit 1
fi
echo "peer_same_model: all losses agree (eval within $TOL, training within $TRAIN_TOL)"
