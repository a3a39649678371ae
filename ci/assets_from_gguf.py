#!/usr/bin/env python3
"""Turns llama.cpp's GGUF vocabularies into the tokenizer files fsdpp and the Hugging Face
references read (ci/fetch_assets.sh calls it with the .venv Python).

  assets_from_gguf.py gpt2 GGUF OUT_DIR
      OUT_DIR/encoder.json and OUT_DIR/vocab.bpe: GPT-2's token -> id map and its merges,
      in OpenAI's file formats (the same as Hugging Face's vocab.json and merges.txt),
      copied from the GGUF's tokenizer.ggml.tokens and tokenizer.ggml.merges.
  assets_from_gguf.py hf GGUF OUT_DIR
      OUT_DIR/tokenizer.json (and tokenizer_config.json): the tokenizer that transformers
      builds from the GGUF (AutoTokenizer.from_pretrained(..., gguf_file=...)), saved with
      save_pretrained: an independent conversion by the Hugging Face stack.
  assets_from_gguf.py hub TOKENIZER_JSON OUT_DIR
      OUT_DIR/tokenizer.json: a tokenizer.json that transformers made from a Llama 3 or a
      Qwen2 GGUF (told apart by its Split pattern), rewritten into the shape of the
      family's Hub file, which transformers' conversion does not reproduce:
        Llama 3 (meta-llama/Meta-Llama-3-8B): model.ignore_merges true (a piece that is
          itself a token is not merged; llama.cpp's llama-bpe does the same);
        Qwen2 (Qwen/Qwen2.5-7B): normalizer NFC, ByteLevel trim_offsets false;
        both: without the added tokens whose id is not in model.vocab (transformers appends
          Llama 3 an "<|endoftext|>" at id 128256, past the GGUF's 128256 tokens).
      Vocabulary, merges and everything else stay as transformers wrote them.

Errors: one line naming the file and what was expected, exit 1.
"""

import json
import os
import sys


def fail(msg):
    print("ci/assets_from_gguf.py: " + msg, file=sys.stderr)
    sys.exit(1)


def string_array(reader, key, path):
    field = reader.fields.get(key)
    if field is None:
        fail("%s has no %s" % (path, key))
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def write_gpt2_files(gguf_path, out_dir):
    import gguf

    reader = gguf.GGUFReader(gguf_path)
    model = bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode()
    if model != "gpt2":
        fail("%s: tokenizer.ggml.model is %r; expected 'gpt2'" % (gguf_path, model))
    tokens = string_array(reader, "tokenizer.ggml.tokens", gguf_path)
    merges = string_array(reader, "tokenizer.ggml.merges", gguf_path)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "encoder.json"), "w", encoding="utf-8") as f:
        json.dump({token: i for i, token in enumerate(tokens)}, f)
    with open(os.path.join(out_dir, "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")


def write_hf_tokenizer(gguf_path, out_dir):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(
        os.path.dirname(os.path.abspath(gguf_path)), gguf_file=os.path.basename(gguf_path)
    )
    tok.save_pretrained(out_dir)
    if not os.path.isfile(os.path.join(out_dir, "tokenizer.json")):
        fail("transformers wrote no tokenizer.json for %s" % gguf_path)


# The Split patterns transformers writes for Llama 3 (tiktoken's cl100k_base) and Qwen2.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def write_hub_shape(tokenizer_json, out_dir):
    with open(tokenizer_json, encoding="utf-8") as f:
        tok = json.load(f)
    try:
        split, byte_level = tok["pre_tokenizer"]["pretokenizers"]
        pattern = split["pattern"]["Regex"]
    except (KeyError, TypeError, ValueError):
        fail(
            "%s: pre_tokenizer is not a Sequence of Split and ByteLevel; expected transformers' "
            "conversion of a Llama 3 or Qwen2 GGUF" % tokenizer_json
        )
    if pattern == LLAMA3_SPLIT:
        tok["model"]["ignore_merges"] = True
    elif pattern == QWEN2_SPLIT:
        tok["normalizer"] = {"type": "NFC"}
        byte_level["trim_offsets"] = False
    else:
        fail("%s: pre_tokenizer Split pattern is neither Llama 3's nor Qwen2's" % tokenizer_json)
    ids = set(tok["model"]["vocab"].values())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] in ids]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main(argv):
    if len(argv) != 4 or argv[1] not in ("gpt2", "hf", "hub"):
        fail("usage: assets_from_gguf.py gpt2|hf GGUF OUT_DIR, or assets_from_gguf.py hub TOKENIZER_JSON OUT_DIR")
    if not os.path.isfile(argv[2]):
        fail("%s: no such file" % argv[2])
    {"gpt2": write_gpt2_files, "hf": write_hf_tokenizer, "hub": write_hub_shape}[argv[1]](argv[2], argv[3])


if __name__ == "__main__":
    main(sys.argv)
