#!/usr/bin/env python3
"""Builds a tokenizer with Gemma's pipeline on the King James Old Testament (ci/fetch_assets.sh
calls it with the .venv Python and PyPI's sentencepiece + protobuf, pinned in ci/assets.lock,
on its PYTHONPATH). Gemma's own 256k vocabulary is not reachable from here (the Hub is not);
this is Gemma's tokenizer *pipeline* with a small vocabulary of our own:

  gemma_tokenizer.py CORPUS_DIR OUT_DIR
      OUT_DIR/tokenizer.model: a SentencePiece BPE model trained on every line of
        CORPUS_DIR/*.txt with the trainer and normalizer settings of Gemma's tokenizer.model
        (below: BPE, byte_fallback, split_digits, no dummy prefix, whitespace kept and
        whitespace-only pieces allowed, identity normalization, <pad> <eos> <bos> <unk> at
        ids 0-3, Gemma's kinds of user-defined pieces: <mask>, <unusedN>, <start_of_turn>,
        <end_of_turn>, newline runs, "▁" runs, HTML tags), VOCAB_SIZE pieces;
      OUT_DIR/tokenizer.json (+ tokenizer_config.json): what transformers' GemmaTokenizer
        makes of that .model (its SentencePiece conversion: SentencePieceExtractor and the
        GemmaConverter registered for it), saved with save_pretrained, unchanged.

Deterministic: one thread, every sentence in file order (no sampling, no shuffling), a fixed
random seed; the sha256 of both files is printed, and ci/fetch_assets.sh checks the .model's
against the one pinned in ci/assets.lock.

Errors: one line naming what was expected, exit 1.
"""

import glob
import hashlib
import io
import json
import os
import sys

VOCAB_SIZE = 4000
SEED = 20261202

# Gemma's user-defined pieces come in these kinds (gemma-2's tokenizer.model: <mask>, <2mass>,
# [@BOS@], <unused0>..<unused98>, <start_of_turn>, <end_of_turn>, runs of 1-31 newlines, runs
# of 2-31 "▁", HTML tags); here fewer of each. SentencePiece keeps each one whole and never
# merges it with a neighbour; transformers writes them as added tokens.
USER_DEFINED = (
    ["<mask>", "<2mass>", "[@BOS@]"]
    + ["<unused%d>" % i for i in range(8)]
    + ["<start_of_turn>", "<end_of_turn>"]
    + ["\n" * n for n in range(1, 32)]
    + ["\u2581" * n for n in range(2, 32)]
    + ["<table>", "<tr>", "<td>", "</td>", "</tr>", "</table>", "<h1>", "</h1>", "<b>", "</b>"]
)


def fail(msg):
    print("ci/gemma_tokenizer.py: " + msg, file=sys.stderr)
    sys.exit(1)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def corpus_lines(corpus_dir):
    files = sorted(glob.glob(os.path.join(corpus_dir, "*.txt")))
    if not files:
        fail("%s: no *.txt files" % corpus_dir)
    lines = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            lines.extend(line for line in f.read().split("\n") if line)
    return lines


def train(corpus_dir, out_dir):
    import sentencepiece as spm

    model = io.BytesIO()
    spm.set_random_generator_seed(SEED)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines(corpus_dir)),
        model_writer=model,
        model_type="bpe",
        vocab_size=VOCAB_SIZE,
        # Gemma's normalizer_spec: identity rules, no dummy "▁" prefix, whitespace kept as it is.
        normalization_rule_name="identity",
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        # Gemma's trainer_spec (what transformers' GemmaConverter lists for it).
        byte_fallback=True,
        split_digits=True,
        split_by_unicode_script=True,
        split_by_number=True,
        split_by_whitespace=True,
        treat_whitespace_as_suffix=False,
        allow_whitespace_only_pieces=True,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        user_defined_symbols=USER_DEFINED,
        # Determinism: every sentence, in order, on one thread.
        input_sentence_size=0,
        shuffle_input_sentence=False,
        num_threads=1,
        minloglevel=2,
    )
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.model")
    with open(path, "wb") as f:
        f.write(model.getvalue())
    return path


def convert(model_path, out_dir):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers import GemmaTokenizer

    tok = GemmaTokenizer.from_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    path = os.path.join(out_dir, "tokenizer.json")
    if not os.path.isfile(path):
        fail("transformers wrote no tokenizer.json for %s" % model_path)
    check_gemma_shape(path)
    return path


def check_gemma_shape(path):
    """The parts of the file that make it Gemma's pipeline, as Gemma's Hub files have them."""
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    expect = {
        "model.type": (model.get("type"), "BPE"),
        "model.byte_fallback": (model.get("byte_fallback"), True),
        "model.unk_token": (model.get("unk_token"), "<unk>"),
        "normalizer": (tok.get("normalizer"), {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}),
        "ids 0-3": ([model["vocab"].get(t) for t in ("<pad>", "<eos>", "<bos>", "<unk>")], [0, 1, 2, 3]),
    }
    for name, (got, want) in expect.items():
        if got != want:
            fail("%s: %s is %r; expected %r (Gemma's)" % (path, name, got, want))


def main(argv):
    if len(argv) != 3:
        fail("usage: gemma_tokenizer.py CORPUS_DIR OUT_DIR")
    model_path = train(argv[1], argv[2])
    json_path = convert(model_path, argv[2])
    print("%s  %s" % (sha256(model_path), model_path))
    print("%s  %s" % (sha256(json_path), json_path))


if __name__ == "__main__":
    main(sys.argv)
