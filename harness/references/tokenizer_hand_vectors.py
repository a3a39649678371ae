#!/usr/bin/env python3
"""Writes the hand vectors of suites/references/hf_judge_tokenizers.sh: one document per .txt
file, the corners of the pre-tokenizer regexes and of NFC, then every input of llama.cpp's
tokenizer vectors (the models/ggml-vocab-*.gguf.inp files among the assets).

    tokenizer_hand_vectors.py ASSETS_DIR OUT_DIR

Each document is written as UTF-8 bytes, as it is; fsdpp data prepare and hf_tokenize.py
read a .txt file as one document. Invalid UTF-8 is not among them: Hugging Face tokenizers
takes text (a Python str), so it cannot judge bytes that are not UTF-8; suites/tokenizer
checks those (byte-level encode is lossless, and splits a bad byte as U+FFFD).

Errors: one line naming the file, exit 2.
"""

import glob
import os
import sys

# The corners, by what they exercise.
CORNERS = [
    # \p{N}{1,3} (Llama 3) and \p{N} (Qwen2): runs of 1 to 7 digits, alone and inside text,
    # and digits that are not ASCII (Arabic-Indic, fullwidth, superscript, Roman numeral).
    "1",
    "12",
    "123",
    "1234",
    "12345",
    "123456",
    "1234567",
    "x1234567y 89",
    " 1234567",
    "3.14159 2,718,281",
    "\u0661\u0662\u0663\u0664\u0665\u0666\u0667",
    "\uff11\uff12\uff13\uff14",
    "x\u00b2+y\u00b3",
    "\u2167 \u00bd",
    # \s*[\r\n]+, \s+(?!\S), \s+: newlines after spaces, trailing and leading whitespace.
    "\r\n\n  x",
    "a\r\n",
    "\t\n \n",
    "  \n\n\t  word",
    "x  \r\n",
    "word   ",
    "   ",
    "\n",
    "\r",
    "x \n y",
    "x\u00a0\u00a0y",
    "\u3000x \u2003y",
    "a\u2028b\u2029c",
    "\u0085x",
    # (?i:'s|'t|'re|'ve|'m|'ll|'d): case-insensitive contractions (U+017F folds to "s").
    "'S",
    "'s",
    "'RE 'Ve 'lL 'D 'M 'T",
    "a'\u017fb",
    "I'M HERE, DON'T YOU'LL",
    "'x",
    "''s",
    "' s",
    # [^\r\n\p{L}\p{N}]?\p{L}+ and  ?[^\s\p{L}\p{N}]+[\r\n]*: a letter run led by punctuation.
    "!hello ?!\n\nx",
    "...\n",
    "(x)",
    "--flag=value",
    "#include <stdio.h>\r\n",
    '"quoted"',
    # Letters of other scripts; marks inside words.
    "\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439 \u043c\u0438\u0440",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c",
    "\uc548\ub155\ud558\uc138\uc694",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    # Emoji: astral symbols, a skin-tone modifier, ZWJ sequences, flags.
    "\U0001f600\U0001f603 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\U0001f1fa\U0001f1f8 ok\U0001f44c",
    # Falcon's Punctuation, Digits and digit triples: punctuation runs (ASCII symbols, Unicode
    # P*, U+166D which tokenizers' old tables call punctuation), numeric characters whose
    # UTF-8 bytes include 0xB2 0xB3 0xB9 0xBC-0xBE, a space before digits.
    "\u201cquoted\u201d\u2014dash\u2026 \u00bfqu\u00e9?",
    "$+<=>^~|` a$b",
    "\u00bd \u00b2\u00b3 1\u00b23 \u00bc\u00be \u00b9",
    " 12 123 12345678",
    "a\u166db \u2e43 \u061d",
    # NFC (Qwen2's Hub file): combining sequences, reordering, singletons, Hangul jamo.
    "e\u0301",
    "A\u030a",
    "\u212b \u2126",
    "a\u0302\u0323",
    "\u1100\u1161\u11a8",
    "\u01c4",
    "q\u0307\u0323",
    "\u0344",
    "e\u0301\u0301",
    # Added tokens of a tokenizer.json: the non-special ones (Phi-3's converted "</s>", Qwen2's
    # "[PAD151646]", Gemma's user-defined pieces: <start_of_turn>, newline runs, "\u2581" runs,
    # HTML tags) split the text before the normalizer, each section normalized on its own;
    # the special ones (<bos>, <eos>, <pad>, <unk>, <mask>, <s>) are plain text.
    "a</s>b",
    "</s>Hello world",
    "Hi </s> there",
    "x[PAD151646]y",
    "<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n",
    "<bos><eos><pad><unk><mask> <s> <unused3>x",
    "\n\n\n\n\nand\n \n",
    "a \u2581\u2581\u2581 b\u2581",
    "<table><tr><td>1</td></tr></table>",
    "\t\tx\t  0123456789",
]


def main(argv):
    if len(argv) != 3:
        print("usage: tokenizer_hand_vectors.py ASSETS_DIR OUT_DIR", file=sys.stderr)
        return 2
    inputs = sorted(glob.glob(os.path.join(argv[1], "llama.cpp", "ggml-vocab-*.gguf.inp")))
    if not inputs:
        print(
            f"tokenizer_hand_vectors.py: no {argv[1]}/llama.cpp/ggml-vocab-*.gguf.inp (run ci/fetch_assets.sh)",
            file=sys.stderr,
        )
        return 2
    docs = list(CORNERS)
    for path in inputs:
        # llama.cpp's format: each input followed by "\n__ggml_vocab_test__\n".
        with open(path, encoding="utf-8", newline="") as f:
            docs += [d for d in f.read().split("\n__ggml_vocab_test__\n") if d]
    os.makedirs(argv[2], exist_ok=True)
    for i, doc in enumerate(docs):
        with open(os.path.join(argv[2], "%04d.txt" % i), "w", encoding="utf-8", newline="") as f:
            f.write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
