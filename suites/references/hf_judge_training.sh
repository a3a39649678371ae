#!/usr/bin/env bash
# PyTorch and transformers judge fsdpp's training: `fsdpp train` on 2 ranks, FULL_SHARD,
# fp32, with gradient accumulation and clipping, against one process training the same
# transformers model from the same initial weights with torch.optim.AdamW and
# clip_grad_norm_ on the same global batches (harness/references/hf_train.py). Every one of
# the 20 per-step losses must agree within 1e-5 relative; the learning rates, step count,
# global batch and windows must be the same. GPT-2 (tied head), Llama (GQA, untied), and
# Gemma 2 and Gemma 3 in the shapes that set their traps: head_dim 24 where hidden/heads is
# 16, query_pre_attn_scalar 20, sliding layers with a window of 16 of the 64 tokens, caps
# small enough for tanh to bend under the 0.02 init (Gemma 2), Gemma 3's local rope base and
# linear scaling, and pad_token_id 11 (',' in GPT-2's tokens, frequent in the text): the
# embedding's padding_idx, whose row gets no gradient from its lookups in either system.
# Phi-3: fused qkv_proj and gate_up_proj, rope on half of each head, every layer sliding.
# Mixtral: 4 experts of which each token takes 2, once without the load-balancing loss and
# once with it (output_router_logits, a coefficient of 0.05 so that it moves the losses);
# Qwen3-MoE with it: q/k norms, an unnormalised top 2 of 4 experts, a dense middle layer.
# Phi (Phi-2's blocks): parallel attention and MLP from one LayerNorm, half rotary, q/k
# LayerNorms, biased projections and head. Falcon: the new decoder architecture (2 key/value
# groups fused group by group, ln_attn and ln_mlp), biases, an untied head.
#
# Usage: hf_judge_training.sh FSDPP_BINARY PYTHON
set -uo pipefail
[ $# -eq 2 ] && [ -x "$1" ] || { echo "usage: $0 FSDPP_BINARY PYTHON" >&2; exit 2; }
fsdpp=$1 python=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
work=$(mktemp -d "${TMPDIR:-/tmp}/hf_judge_train.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$repo/suites/references/serve.sh"  # ref ARG...: hf_train.py ARG..., in one process
ref_start "$work" "$python" "$repo/harness/references/hf_train.py"
export OMP_NUM_THREADS=1
passed=0 failed=0

# Six chapters of the New Testament, GPT-2 tokens (the Llama model below uses ids < 32000).
mkdir -p "$work/text"
cp "$assets"/corpora/kjv-new-testament/093[0-5].txt "$work/text/"
"$fsdpp" data prepare --input "$work/text" --output "$work/data" --tokenizer "$assets/gpt2" --eval-fraction 0 \
  >"$work/prepare.log" 2>&1 || { cat "$work/prepare.log"; exit 1; }

common=(--data "$work/data/train_*.tok" --seq-len 64 --batch-size 2 --grad-accum-steps 2 --max-steps 20
        --grad-clip 1.0 --lr 1e-3 --min-lr 1e-4 --warmup-steps 3 --weight-decay 0.1 --seed 7)

judge() {  # NAME INIT_CONFIG_JSON
  local name=$1 config=$2 init=$work/$1-init
  if ! ref --write-init "$init" --init-config "$config" --seed 1 >"$work/init.log" 2>&1; then
    echo "FAIL $name: could not write the initial weights:"; tail -n 5 "$work/init.log"; failed=$((failed + 1)); return
  fi
  if ! "$fsdpp" train --nproc 2 --strategy full_shard --model "$init" --save-dir "$work/runs" --experiment-name "$name" \
       "${common[@]}" >"$work/train.log" 2>&1; then
    echo "FAIL $name: fsdpp train failed:"; tail -n 10 "$work/train.log"; failed=$((failed + 1)); return
  fi
  if ref --model "$init" --world-size 2 "${common[@]}" \
       --compare-metrics "$work/runs/$name/metrics.jsonl" >"$work/compare.log" 2>&1; then
    echo "ok   $name: $(tail -n 1 "$work/compare.log" | cut -c1-200)"; passed=$((passed + 1))
  else
    echo "FAIL $name:"; tail -n 25 "$work/compare.log"; failed=$((failed + 1))
  fi
}

judge gpt2 '{"model_type": "gpt2", "vocab_size": 50257, "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 4}'
judge llama '{"model_type": "llama", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "tie_word_embeddings": false}'
gemma='"vocab_size": 50257, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
  "num_key_value_heads": 2, "head_dim": 24, "query_pre_attn_scalar": 20, "sliding_window": 16,
  "max_position_embeddings": 256, "pad_token_id": 11'
judge gemma2 "{\"model_type\": \"gemma2\", $gemma, \"num_hidden_layers\": 2, \"attn_logit_softcapping\": 0.05,
  \"final_logit_softcapping\": 0.5}"
judge gemma3 "{\"model_type\": \"gemma3_text\", $gemma, \"num_hidden_layers\": 3, \"sliding_window_pattern\": 3,
  \"rope_local_base_freq\": 100.0, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4.0},
  \"tie_word_embeddings\": false}"
judge phi3 '{"model_type": "phi3", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "partial_rotary_factor": 0.5, "sliding_window": 16, "pad_token_id": 11}'
judge mixtral '{"model_type": "mixtral", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": false}'
judge phi '{"model_type": "phi", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "partial_rotary_factor": 0.5, "qk_layernorm": true}'
judge falcon '{"model_type": "falcon", "vocab_size": 50257, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_kv_heads": 2, "new_decoder_architecture": true, "ffn_hidden_size": 128,
  "bias": true, "tie_word_embeddings": false, "max_position_embeddings": 256}'
judge mixtral-aux '{"model_type": "mixtral", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 64,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256,
  "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": false, "output_router_logits": true,
  "router_aux_loss_coef": 0.05}'
judge qwen3-moe '{"model_type": "qwen3_moe", "vocab_size": 50257, "hidden_size": 64, "intermediate_size": 96,
  "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 24, "max_position_embeddings": 256, "num_experts": 4, "num_experts_per_tok": 2,
  "norm_topk_prob": false, "mlp_only_layers": [1], "output_router_logits": true, "router_aux_loss_coef": 0.05}'
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
