#!/usr/bin/env bash
# Hugging Face `tokenizers` judges fsdpp's tokenizers: on every document of both demo
# corpora (the King James Old and New Testament) and of the hand vectors (the regex and NFC
# corners, and every input of llama.cpp's tokenizer vectors:
# harness/references/tokenizer_hand_vectors.py), `fsdpp data prepare` must give exactly the
# ids that HF gives (harness/references/hf_tokenize.py --compare-tok: every id, the first
# difference named with its document and position), with each tokenizer:
#   gpt2                       GPT-2's vocabulary (encoder.json + vocab.bpe)
#   hf-llama-spm, hf-phi-3     Llama-2's and Phi-3's SentencePiece-style tokenizer.json
#   hf-llama-bpe, hf-qwen2     Llama 3's and Qwen2's byte-level tokenizer.json, as transformers
#                              converts them from llama.cpp's GGUF vocabularies
#   hf-llama-bpe-hub,          the same in the shape of the Hub's files (ignore_merges;
#   hf-qwen2-hub               NFC normalizer)
#   hf-falcon-hub              Falcon's, with its Hub file's pre-tokenizer Sequence
#   hf-gemma-kjv               Gemma's pipeline (a SentencePiece BPE trained with Gemma's
#                              settings on the Old Testament, converted by transformers'
#                              GemmaTokenizer: ci/gemma_tokenizer.py); Gemma's own 256k
#                              vocabulary is not among the assets
#
# Usage: hf_judge_tokenizers.sh FSDPP_BINARY PYTHON
set -uo pipefail
[ $# -eq 2 ] && [ -x "$1" ] || { echo "usage: $0 FSDPP_BINARY PYTHON" >&2; exit 2; }
fsdpp=$1 python=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
assets=${FSDPP_ASSETS_DIR:-$repo/.cache/assets}
work=$(mktemp -d "${TMPDIR:-/tmp}/hf_judge_tok.XXXXXX")
trap 'rm -rf "$work"' EXIT
source "$repo/suites/references/serve.sh"  # ref ARG...: hf_tokenize.py ARG..., in one process
ref_start "$work" "$python" "$repo/harness/references/hf_tokenize.py"
"$python" "$repo/harness/references/tokenizer_hand_vectors.py" "$assets" "$work/hand-vectors" || exit 2
passed=0 failed=0
for corpus in "$assets/corpora/kjv-old-testament" "$assets/corpora/kjv-new-testament" "$work/hand-vectors"; do
  for tokenizer in gpt2 hf-llama-spm/tokenizer.json hf-phi-3/tokenizer.json hf-llama-bpe/tokenizer.json \
                   hf-llama-bpe-hub/tokenizer.json hf-qwen2/tokenizer.json hf-qwen2-hub/tokenizer.json \
                   hf-falcon-hub/tokenizer.json hf-gemma-kjv/tokenizer.json; do
    name="$(basename "$corpus")/${tokenizer%/tokenizer.json}"
    out=$work/$(basename "$corpus")-$(echo "$tokenizer" | tr '/.' '__')
    if ! "$fsdpp" data prepare --input "$corpus" --output "$out" --tokenizer "$assets/$tokenizer" \
         --eval-fraction 0 >"$work/prepare.log" 2>&1; then
      echo "FAIL $name: fsdpp data prepare failed:"; tail -n 5 "$work/prepare.log"; failed=$((failed + 1)); continue
    fi
    if ref --tokenizer "$assets/$tokenizer" \
         --input "$corpus" --compare-tok "$out"/train_*.tok >"$work/compare.log" 2>&1; then
      echo "ok   $name: $(tail -n 1 "$work/compare.log" | cut -c1-200)"; passed=$((passed + 1))
    else
      echo "FAIL $name:"; tail -n 8 "$work/compare.log"; failed=$((failed + 1))
    fi
  done
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
