#!/usr/bin/env python3
"""Turns llama.cpp's GGUF vocabularies into the tokenizer files fsdpp and the Hugging Face
references read (ci/fetch_assets.sh calls it with the .venv Python).

  assets_from_gguf.py gpt2 GGUF OUT_DIR
      OUT_DIR/encoder.json and OUT_DIR/vocab.bpe: GPT-2's token -> id map and its merges,
      in OpenAI's file formats (the same as Hugging Face's vocab.json and merges.txt),
      copied from the GGUF's tokenizer.ggml.tokens and tokenizer.ggml.merges.
  assets_from_gguf.py hf GGUF OUT_DIR [GGUF OUT_DIR ...]
      OUT_DIR/tokenizer.json (and tokenizer_config.json): the tokenizer that transformers
      builds from the GGUF (AutoTokenizer.from_pretrained(..., gguf_file=...)), saved with
      save_pretrained: an independent conversion by the Hugging Face stack. Several pairs
      are converted in one process (one import of transformers).
  assets_from_gguf.py hub llama3|qwen2|falcon TOKENIZER_JSON OUT_DIR
      OUT_DIR/tokenizer.json: a tokenizer.json that transformers made from that family's
      GGUF, rewritten into the shape of the family's Hub file, which transformers'
      conversion does not reproduce:
        llama3 (meta-llama/Meta-Llama-3-8B): model.ignore_merges true (a piece that is
          itself a token is not merged; llama.cpp's llama-bpe does the same);
        qwen2 (Qwen/Qwen2.5-7B): normalizer NFC, ByteLevel trim_offsets false;
        falcon (tiiuae/falcon-7b): pre_tokenizer Sequence [Punctuation (Contiguous),
          ByteLevel, Digits (individual_digits false), Split "[0-9][0-9][0-9]" (Isolated)]
          where transformers writes a plain ByteLevel (GPT-2's regex);
        all: without the added tokens whose id is not in model.vocab (transformers appends
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


FALCON_PRE_TOKENIZER = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False},
    ],
}


def write_hub_shape(family, tokenizer_json, out_dir):
    with open(tokenizer_json, encoding="utf-8") as f:
        tok = json.load(f)
    pre = tok.get("pre_tokenizer") or {}
    if family == "falcon":
        if pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
            fail(
                "%s: pre_tokenizer is not a ByteLevel with use_regex; expected transformers' conversion of "
                "Falcon's GGUF" % tokenizer_json
            )
        tok["pre_tokenizer"] = FALCON_PRE_TOKENIZER
    else:
        try:
            split, byte_level = pre["pretokenizers"]
            pattern = split["pattern"]["Regex"]
        except (KeyError, TypeError, ValueError):
            pattern = None
        if pattern != {"llama3": LLAMA3_SPLIT, "qwen2": QWEN2_SPLIT}[family]:
            fail(
                "%s: pre_tokenizer is not a Sequence of a Split by %s's regex and a ByteLevel; expected "
                "transformers' conversion of its GGUF" % (tokenizer_json, family)
            )
        if family == "llama3":
            tok["model"]["ignore_merges"] = True
        else:
            tok["normalizer"] = {"type": "NFC"}
            byte_level["trim_offsets"] = False
    ids = set(tok["model"]["vocab"].values())
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] in ids]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main(argv):
    usage = (
        "usage: assets_from_gguf.py gpt2 GGUF OUT_DIR, assets_from_gguf.py hf GGUF OUT_DIR [GGUF OUT_DIR ...], "
        "or assets_from_gguf.py hub llama3|qwen2|falcon TOKENIZER_JSON OUT_DIR"
    )
    if len(argv) == 5 and argv[1] == "hub" and argv[2] in ("llama3", "qwen2", "falcon"):
        if not os.path.isfile(argv[3]):
            fail("%s: no such file" % argv[3])
        write_hub_shape(argv[2], argv[3], argv[4])
        return
    if argv[1:2] == ["gpt2"] and len(argv) == 4:
        writer = write_gpt2_files
    elif argv[1:2] == ["hf"] and len(argv) >= 4 and len(argv) % 2 == 0:
        writer = write_hf_tokenizer
    else:
        fail(usage)
    pairs = list(zip(argv[2::2], argv[3::2], strict=True))
    for gguf_path, _ in pairs:
        if not os.path.isfile(gguf_path):
            fail("%s: no such file" % gguf_path)
    for gguf_path, out_dir in pairs:
        try:
            writer(gguf_path, out_dir)
        except Exception as e:  # one line naming the file, whatever the converter raised
            fail("%s: %s: %s" % (gguf_path, type(e).__name__, e))


if __name__ == "__main__":
    main(sys.argv)
