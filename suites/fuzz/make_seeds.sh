#!/usr/bin/env bash
# Makes the seed corpora of the fuzz targets, suites/fuzz/corpus/<target>/, from the
# project's own valid files: the repository's results documents and fixtures, the
# tokenizer assets (.cache/assets, ci/fetch_assets.sh) cut down to a few hundred tokens,
# the files a tiny `fsdpp train` run and a small `fsdpp data prepare` write, files written
# by the libraries the references use (Hugging Face's safetensors and transformers in
# .venv), and the checkpoint and index seeds that only the fuzz targets can make (they
# match the rank files and shards the targets create at start-up; FSDPP_FUZZ_WRITE_SEED).
#
#   suites/fuzz/make_seeds.sh [BUILD_FUZZ_DIR]    (default build-fuzz, built by ci/fuzz.sh)
#
# Needs build/fsdpp (or build/harness/cli/fsdpp) and .venv. Replaces the corpus folders; every
# seed is kept under 64 KiB (large assets are cut down, not copied). Deterministic but for
# the temporary folder names that the tiny run's index.json records.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
fuzz_build=$(cd "${1:-$repo/build-fuzz}" && pwd)
corpus=$repo/suites/fuzz/corpus
assets=$repo/.cache/assets
python=$repo/.venv/bin/python
fail() { echo "suites/fuzz/make_seeds.sh: $*" >&2; exit 1; }

fsdpp=""
for candidate in "$repo/build/harness/cli/fsdpp" "$repo/build/fsdpp"; do
  [ -x "$candidate" ] && { fsdpp=$candidate; break; }
done
[ -n "$fsdpp" ] || fail "no fsdpp binary in build/ (build the main tree first)"
[ -x "$python" ] || fail "no $python (bash ci/setup.sh)"
[ -f "$assets/gpt2/encoder.json" ] || fail "no tokenizer assets in $assets (bash ci/fetch_assets.sh)"
[ -x "$fuzz_build/checkpoint_index_fuzz" ] || fail "no fuzz targets in $fuzz_build (bash ci/fuzz.sh builds them)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() { nice -n 19 "$@"; }  # another process may be timing benchmarks on this machine

targets=(safetensors_file safetensors_index hf_config train_config tokenizer_json gpt2_bpe gguf_vocab
         token_file data_manifest checkpoint_index results_document)
for t in "${targets[@]}"; do rm -rf "${corpus:?}/$t"; mkdir -p "$corpus/$t"; done

# ---- files fsdpp writes -------------------------------------------------------------------

# A learnable token stream (each token mostly follows from the previous one), as an llm.c
# .bin file, for the tiny training runs.
run "$python" - "$work/tokens.bin" <<'EOF'
import random, struct, sys
random.seed(11)
tokens, t = [], 1
for _ in range(600):
    t = (t * 5 + 3 + random.randrange(3)) % 64
    tokens.append(t)
header = [20240520, 1, len(tokens)] + [0] * 253
open(sys.argv[1], "wb").write(struct.pack("<256i", *header) + struct.pack("<%dH" % len(tokens), *tokens))
EOF
for family in gpt2 llama; do
  run "$fsdpp" train --threads 1 --from-scratch --model-type $family --model-size tiny --vocab-size 64 --seq-len 16 \
    --batch-size 2 --max-steps 2 --ckpt-freq 1 --data "$work/tokens.bin" --save-dir "$work/runs" \
    --experiment-name $family >"$work/train-$family.log" 2>&1 || { cat "$work/train-$family.log" >&2; fail "fsdpp train failed"; }
  cp "$work/runs/$family/hf/config.json" "$corpus/hf_config/fsdpp-$family-tiny.json"
done
cp "$work/runs/gpt2/checkpoints/step-000002/index.json" "$corpus/checkpoint_index/fsdpp-train-gpt2-tiny.json"
cp "$work/tokens.bin" "$corpus/token_file/llmc-600.bin"

# A small `fsdpp data prepare`: three KJV chapters, GPT-2's tokenizer, two train shards and
# an eval shard.
mkdir -p "$work/text"
cp "$assets"/corpora/kjv-new-testament/093{0,1,2}.txt "$work/text/"
run "$fsdpp" data prepare --input "$work/text" --output "$work/data" --tokenizer "$assets/gpt2" \
  --eval-fraction 0.34 --shard-tokens 1200 --workers 1 >"$work/prepare.log" 2>&1 ||
  { cat "$work/prepare.log" >&2; fail "fsdpp data prepare failed"; }
cp "$work/data/train_000000.tok" "$corpus/token_file/fsdpp-train-000000.tok"
cp "$work/data/eval_000000.tok" "$corpus/token_file/fsdpp-eval-000000.tok"
cp "$work/data/manifest.json" "$corpus/data_manifest/fsdpp-prepare.json"

# ---- seeds only the targets can make --------------------------------------------------------

# The checkpoint target's index.json matches the rank files it writes at start-up (with
# the checkpoint writer's safetensors call), and takes the tiny run's train_state; the
# index target's index is write_sharded_safetensors's own. Their safetensors files seed
# the file target.
mkdir -p "$work/seed-checkpoint" "$work/seed-index"
FSDPP_FUZZ_WRITE_SEED="$work/seed-checkpoint" FSDPP_FUZZ_TRAIN_STATE="$work/runs/gpt2/checkpoints/step-000002/index.json" \
  run "$fuzz_build/checkpoint_index_fuzz" >/dev/null 2>&1 || fail "checkpoint_index_fuzz could not write its seed"
cp "$work/seed-checkpoint/index.json" "$corpus/checkpoint_index/matching-rank-files.json"
FSDPP_FUZZ_WRITE_SEED="$work/seed-index" run "$fuzz_build/safetensors_index_fuzz" >/dev/null 2>&1 ||
  fail "safetensors_index_fuzz could not write its seed"
cp "$work/seed-index/model.safetensors.index.json" "$corpus/safetensors_index/fsdpp-writer.json"
for f in "$work"/seed-checkpoint/*.safetensors "$work"/seed-index/*.safetensors; do
  cp "$f" "$corpus/safetensors_file/fsdpp-$(basename "$f")"
done

# ---- files the references' libraries write, and the assets cut down -------------------------

run "$python" - "$repo" "$assets" "$corpus" <<'EOF'
import json, os, struct, sys
repo, assets, corpus = sys.argv[1:4]
SEP = "\n#--fsdpp-fuzz-next-file--#\n"  # suites/fuzz/fuzz_support.h, kFileSeparator

def write(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(corpus, target, name), "wb") as f:
        f.write(data)

def dump(obj):
    return json.dumps(obj, ensure_ascii=False, indent=2) + "\n"

# safetensors files from Hugging Face's own writer: every dtype, a 0-d and an empty tensor,
# metadata (fsdpp's writer made the rank files and shards above).
import torch
from safetensors.torch import save
write("safetensors_file", "hf-all-dtypes.safetensors", save({
    "f64": torch.arange(3, dtype=torch.float64), "i64": torch.arange(4), "f32": torch.ones(2, 3),
    "i32": torch.arange(2, dtype=torch.int32), "bf16": torch.ones(3, dtype=torch.bfloat16),
    "f16": torch.ones(2, dtype=torch.float16), "i16": torch.arange(2, dtype=torch.int16),
    "u8": torch.arange(5, dtype=torch.uint8), "i8": torch.arange(3, dtype=torch.int8),
    "bool": torch.tensor([True, False]), "f8_e4m3": torch.ones(2, dtype=torch.float8_e4m3fn),
    "f8_e5m2": torch.ones(2, dtype=torch.float8_e5m2), "u16": torch.tensor([1, 2], dtype=torch.uint16),
    "scalar": torch.tensor(1.5), "empty": torch.ones(0, 4)}, metadata={"format": "pt"}))
write("safetensors_file", "hf-one-tensor.safetensors", save({"weight": torch.arange(6, dtype=torch.float32).reshape(2, 3)}))

# An index as transformers' save_pretrained writes it for the index target's shards, with
# total_size as a float (some writers do).
write("safetensors_index", "hf-float-total-size.json", dump({
    "metadata": {"total_size": 60.0},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors",
                   "c": "model-00002-of-00002.safetensors"}}))

# Hugging Face configs as transformers writes them (small sizes).
from transformers import GPT2Config, LlamaConfig, MistralConfig, OPTConfig
configs = {
    "transformers-gpt2.json": GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=64, n_positions=128,
                                         bos_token_id=0, eos_token_id=0),
    "transformers-opt.json": OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                                       vocab_size=64, max_position_embeddings=128, word_embed_proj_dim=64),
    "transformers-llama.json": LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                           num_key_value_heads=2, intermediate_size=128, vocab_size=64),
    "transformers-llama3-rope.json": LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                 intermediate_size=128, vocab_size=64, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024}),
    "transformers-mistral.json": MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                               num_key_value_heads=2, intermediate_size=128, vocab_size=64),
}
for name, config in configs.items():
    config.architectures = [type(config).__name__.replace("Config", "ForCausalLM")]
    write("hf_config", name, config.to_json_string(use_diff=False))

# `fsdpp train --config` files: the suite's YAML, and every kind of value in YAML and JSON.
write("train_config", "suite-train.yaml", "from_scratch: true\nmodel-size: tiny\nvocab_size: 256\nseq_len: 16\n"
      "batch_size: 2\nmax_steps: 5\nlr: 0.002\nno_shuffle: true\ndata: tokens.bin\n")
full = {"from_scratch": True, "model_type": "llama", "model_size": "tiny", "vocab_size": 64, "data": "train.tok",
        "eval_data": "eval.tok", "seq_len": 16, "batch_size": 2, "grad_accum_steps": 2, "lr": 3e-3,
        "min_lr": 1e-4, "warmup_steps": 2, "lr_schedule": "linear", "max_steps": 4, "weight_decay": 0.1,
        "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_eps": 1e-8, "grad_clip": 1.0, "strategy": "hybrid_shard",
        "hybrid_shard_size": 2, "backward_prefetch": "post", "wrap_policy": "size:1000", "mixed_precision": "bf16",
        "activation_checkpointing": True, "ac_freq": 2, "cpu_offload": False, "deterministic": True,
        "device": "cpu", "save_dir": "runs", "experiment_name": "fuzz", "ckpt_freq": 2, "keep_last": 1,
        "async_checkpoint": True, "resume": "never", "loss_scaling": True, "loss_scale_growth_interval": 100,
        "log_freq": 1, "eval_freq": 2, "seed": 7, "nproc": 2, "threads": 1, "timeout_s": 30.5}
write("train_config", "every-option.json", dump(full))
yaml_lines = []
for key, value in full.items():
    text = json.dumps(value) if not isinstance(value, str) else value
    yaml_lines.append("%s: %s" % (key.replace("_", "-") if key in ("seq_len", "lr_schedule") else key, text))
write("train_config", "every-option.yaml", "# fsdpp train --config\n" + "\n".join(yaml_lines) + "\n")
write("train_config", "anchors.yaml",
      "from_scratch: true\nmodel_size: tiny\ndata: 'a.tok, b.tok'\nlr: &peak 0x10\nmin_lr: 0o7\n"
      "warmup_steps: &warm 2\neval_freq: *warm\nnum_epochs: 1.5e0\nseed: 42\nexperiment_name: \"x\"\n"
      "resume: |\n  never\n")

# Tokenizers: the assets cut down to a few hundred tokens, keeping every merge whose parts
# and result are kept.
def parts(merge):
    return merge.split(" ", 1) if isinstance(merge, str) else merge

def cut_merges(merges, vocab, limit):
    kept = [m for m in merges if len(parts(m)) == 2 and all(p in vocab for p in parts(m)) and "".join(parts(m)) in vocab]
    return kept[:limit]

llama = json.load(open(os.path.join(assets, "hf-llama-spm", "tokenizer.json"), encoding="utf-8"))
llama_vocab = {t: i for t, i in llama["model"]["vocab"].items() if i < 400}
llama["model"]["vocab"] = llama_vocab
llama["model"]["merges"] = cut_merges(llama["model"]["merges"], llama_vocab, 300)
llama["added_tokens"] = [t for t in llama.get("added_tokens", []) if t["id"] < 400]
write("tokenizer_json", "llama-spm-metaspace.json", dump(llama))
legacy = dict(llama)
legacy["pre_tokenizer"] = None
legacy["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
legacy["model"] = dict(llama["model"], merges=[" ".join(parts(m)) for m in llama["model"]["merges"]])
write("tokenizer_json", "llama-spm-normalizer.json", dump(legacy))

encoder = json.load(open(os.path.join(assets, "gpt2", "encoder.json"), encoding="utf-8"))
merge_lines = open(os.path.join(assets, "gpt2", "vocab.bpe"), encoding="utf-8").read().split("\n")
gpt2_vocab = {t: i for t, i in encoder.items() if i < 256 + 300}
gpt2_vocab["<|endoftext|>"] = len(gpt2_vocab)
gpt2_merges = cut_merges([l for l in merge_lines[1:] if l], gpt2_vocab, 300)
write("gpt2_bpe", "gpt2-300-merges.txt", json.dumps(gpt2_vocab, ensure_ascii=False) + SEP +
      merge_lines[0] + "\n" + "\n".join(gpt2_merges) + "\n")
byte_level_seed = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": gpt2_vocab["<|endoftext|>"], "content": "<|endoftext|>", "single_word": False,
                      "lstrip": False, "rstrip": False, "normalized": True, "special": True}],
    "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                        "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
              "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
              "vocab": gpt2_vocab, "merges": [parts(m) for m in gpt2_merges]}}
write("tokenizer_json", "gpt2-byte-level.json", dump(byte_level_seed))
# The same vocabulary behind the other byte-level pre-tokenizers fsdpp reads (Llama 3's and
# Qwen2's Split + ByteLevel, Qwen2's NFC, Falcon's Sequence), the patterns as the Hub files
# write them.
llama3_split = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
def split_then_byte_level(regex):
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
write("tokenizer_json", "llama3-split.json", dump(dict(byte_level_seed, pre_tokenizer=split_then_byte_level(llama3_split))))
write("tokenizer_json", "qwen2-nfc-split.json", dump(dict(
    byte_level_seed, normalizer={"type": "NFC"},
    pre_tokenizer=split_then_byte_level(llama3_split.replace(r"\p{N}{1,3}", r"\p{N}")))))
write("tokenizer_json", "falcon-sequence.json", dump(dict(byte_level_seed, pre_tokenizer={
    "type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]})))

# GGUF vocabularies (llama.cpp's), cut down: the tokenizer.ggml.* keys of the first tokens,
# plus general.* keys and an array of arrays for the reader to skip.
STRING, ARRAY, U32, F32, I32, BOOL, U8 = 8, 9, 4, 6, 5, 7, 0
def read_gguf(path):
    data = open(path, "rb").read()
    pos = 24
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", data, 0)
    def take(fmt):
        nonlocal pos
        value = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value[0]
    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8", "surrogateescape")
        pos += n
        return s
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
    def value(kind):
        if kind == STRING:
            return string()
        if kind == ARRAY:
            elem, n = take("<I"), take("<Q")
            return (elem, [value(elem) for _ in range(n)])
        return take(scalar[kind])
    kv = {}
    for _ in range(n_kv):
        key = string()
        kind = take("<I")
        kv[key] = (kind, value(kind))
    return kv

def gguf_bytes(items):
    out = [struct.pack("<IIQQ", 0x46554747, 3, 0, len(items))]
    def string(s):
        b = s.encode("utf-8", "surrogateescape")
        return struct.pack("<Q", len(b)) + b
    def value(kind, v):
        if kind == STRING:
            return string(v)
        if kind == ARRAY:
            elem, values = v
            return struct.pack("<IQ", elem, len(values)) + b"".join(value(elem, x) for x in values)
        return struct.pack({U32: "<I", F32: "<f", I32: "<i", BOOL: "<B", U8: "<B"}[kind], v)
    for key, kind, v in items:
        out.append(string(key) + struct.pack("<I", kind) + value(kind, v))
    return b"".join(out)

for name, keep in (("llama-spm", 400), ("gpt-2", 556)):
    kv = read_gguf(os.path.join(assets, "llama.cpp", "ggml-vocab-%s.gguf" % name))
    tokens = kv["tokenizer.ggml.tokens"][1][1][:keep]
    items = [("general.architecture", STRING, kv["general.architecture"][1]),
             ("general.name", STRING, "fsdpp fuzz seed from ggml-vocab-%s.gguf" % name),
             ("fsdpp.skipped.nested", ARRAY, (ARRAY, [(U32, [1, 2]), (U32, [])])),
             ("tokenizer.ggml.model", STRING, kv["tokenizer.ggml.model"][1]),
             ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens))]
    if "tokenizer.ggml.pre" in kv:
        items.append(("tokenizer.ggml.pre", STRING, kv["tokenizer.ggml.pre"][1]))
    for key, elem in (("tokenizer.ggml.scores", F32), ("tokenizer.ggml.token_type", I32)):
        if key in kv:
            items.append((key, ARRAY, (elem, kv[key][1][1][:keep])))
    if "tokenizer.ggml.merges" in kv:
        items.append(("tokenizer.ggml.merges", ARRAY, (STRING, cut_merges(kv["tokenizer.ggml.merges"][1][1],
                                                                           set(tokens), 300))))
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        if key in kv and kv[key][1] < keep:
            items.append((key, U32, kv[key][1]))
    items.append(("tokenizer.ggml.add_space_prefix", BOOL, 1))
    write("gguf_vocab", "ggml-vocab-%s-%d.gguf" % (name, keep), gguf_bytes(items))

# Token files: a uint32 fsdpp shard and an empty llm.c file beside the ones fsdpp wrote.
tokens = list(range(70000, 70040))
write("token_file", "fsdpp-uint32.tok", b"FSDPPTOK" + struct.pack("<IIQQ", 1, 2, len(tokens), 1) + bytes(32) +
      struct.pack("<%dI" % len(tokens), *tokens))

# Results documents from the repository: version 1 of several machines, and version 0.
results = [("results/history/ed0770582da8caf7/20261125T024904Z-cfdaf222.json", "v1-cpu-smoke.json"),
           ("results/history/879599263e345b6a/20261123T200033Z-440d057d.json", "v1-history.json"),
           ("results/cpu-binding/20261123T020026Z-84f86293.json", "v1-cpu-binding.json"),
           ("suites/results/fixtures/v0_gpu.json", "v0-fixture.json"),
           ("results/gpu/gpu-nvidia-h100-80gb-hbm3-20261122T163625Z.json", "v0-gpu.json")]
for source, name in results:
    write("results_document", name, open(os.path.join(repo, source), "rb").read())
EOF

# Every seed under 64 KiB, the corpus under 2 MiB.
big=$(find "$corpus" -type f -size +64k)
[ -z "$big" ] || fail "seeds over 64 KiB: $big"
total=$(du -sb "$corpus" | cut -f1)
[ "$total" -lt $((2 * 1024 * 1024)) ] || fail "corpus is $total bytes, over 2 MiB"
for t in "${targets[@]}"; do printf '%-20s %3d seeds\n' "$t" "$(find "$corpus/$t" -type f | wc -l)"; done
