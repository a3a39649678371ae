#!/usr/bin/env python3
"""Hugging Face reference for `fsdpp data prepare`: the token ids of a folder of documents.

    hf_tokenize.py --tokenizer PATH --input FOLDER [--out FILE.json] [--compare-tok SHARD ...]

PATH is a folder with GPT-2's files (encoder.json + vocab.bpe, or vocab.json + merges.txt)
or a tokenizer.json (a folder holding one works too), the lookup of fsdpp's
core/tokenizer/load.cpp. The ids come from the `tokenizers` library: for GPT-2 a BPE model
built from the two files with the ByteLevel pre-tokenizer (what GPT2TokenizerFast builds),
for a tokenizer.json `Tokenizer.from_file`.

Documents are those of core/data/prepare.h: the input files sorted by path (a folder is
walked recursively), a .txt file is one document, every string value of a .json file (and
of each line of a .jsonl file) is one, empty documents are dropped (.yaml is not supported
here). Each document is encoded on its own with add_special_tokens=False (no BOS/EOS from
the post-processor) and prefixed with the document separator: <|endoftext|> if the
vocabulary has it, else <s>, else <|begin_of_text|>, else <bos>. Special-token text inside a
document is plain text (`encode_special_tokens`), as in fsdpp's encode() and llama.cpp's
tokenize(parse_special=false): "<s>" in a document is "<", "s", ">", not id 1. Non-special
added tokens (Gemma's user-defined pieces) are found, as HF finds them.

Output (stdout, or --out): {"documents", "tokens", "sha256" (of all ids as little-endian
int32, in document order, separators included), "per_document": [{"index", "file",
"ids_sha256", "count"}], "tokenizer"}.

--compare-tok SHARD ... checks fsdpp token shards (core/data/TOKENS.md) against these ids
in data prepare's layout: documents [start_idx, end_idx) of the input; document i of that
slice in the eval split iff floor((i+1)f) > floor(i*f) (f = eval_fraction); each split's
ids concatenated and cut into train_NNNNNN.tok / eval_NNNNNN.tok of shard_tokens tokens.
Those options come from the flags, else from the manifest.json beside the shards, else
data prepare's defaults (everything in train). The given shards of a split, sorted by
name, must hold exactly that split's ids (and the right header document counts); the
first differing document and position are printed with the text around them. Without
--out, nothing but the comparison is printed.

Exit codes: 0 done (and equal), 1 a comparison failed, 2 bad usage or input.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import torch_peer  # open_token_file: the .tok reader

EXIT_MISMATCH = 1
EXIT_USAGE = 2
SEPARATORS = ("<|endoftext|>", "<s>", "<|begin_of_text|>", "<bos>")  # in order of preference, as document_separator_id
INPUT_KINDS = {".txt": "text", ".json": "json", ".jsonl": "jsonl", ".yaml": "yaml", ".yml": "yaml"}


class UsageError(Exception):
    """Bad usage or input: one line on stderr, exit 2."""


# ----------------------------------------------------------------------------------------
# The reference tokenizer
# ----------------------------------------------------------------------------------------


def load_hf_tokenizer(path):
    """(tokenizers.Tokenizer, description) for a tokenizer.json or a GPT-2 vocabulary folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if os.path.isdir(path) and os.path.isfile(os.path.join(path, "tokenizer.json")):
        path = os.path.join(path, "tokenizer.json")
    if os.path.isfile(path):
        try:
            tok = Tokenizer.from_file(path)
        except Exception as e:  # tokenizers raises plain Exception for a file it cannot parse
            raise UsageError(f"--tokenizer {path}: not a tokenizer.json that tokenizers can load: {e}") from e
        desc = f"tokenizers.Tokenizer.from_file({path})"
    elif os.path.isdir(path):
        for vocab, merges in (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe")):
            v, m = os.path.join(path, vocab), os.path.join(path, merges)
            if os.path.isfile(v) and os.path.isfile(m):
                break
        else:
            raise UsageError(
                f"--tokenizer {path}: no tokenizer.json, vocab.json + merges.txt or encoder.json + vocab.bpe here"
            )
        # What GPT2TokenizerFast builds from these files: byte-level BPE, GPT-2's regex, no
        # prefix space; no added tokens, so "<|endoftext|>" in text stays plain text.
        tok = Tokenizer(models.BPE.from_file(v, m))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        desc = f"tokenizers BPE.from_file({v}, {m}) + ByteLevel(add_prefix_space=False)"
    else:
        raise UsageError(f"--tokenizer {path}: no such file or folder (expected tokenizer.json or a GPT-2 folder)")
    tok.encode_special_tokens = True  # special-token text is plain text, as in fsdpp
    return tok, desc


def separator_id(tok, source):
    for name in SEPARATORS:
        i = tok.token_to_id(name)
        if i is not None:
            return i, name
    raise UsageError(f"--tokenizer {source}: the vocabulary has none of {', '.join(SEPARATORS)} (expected a separator)")


# ----------------------------------------------------------------------------------------
# Documents, as core/data/prepare.cpp defines them
# ----------------------------------------------------------------------------------------


def path_key(path):
    """std::filesystem::path's order: element by element, each compared as unsigned bytes."""
    return tuple(os.fsencode(p) for p in path.split(os.sep) if p)


def list_inputs(input_path, exclude_dirs):
    """The input files in fsdpp's order; folders in `exclude_dirs` are not read (fsdpp skips
    its output folder when it lies inside the input)."""
    if not os.path.exists(input_path):
        raise UsageError(f"--input {input_path}: no such file or folder")
    if not os.path.isdir(input_path):
        if os.path.splitext(input_path)[1].lower() not in INPUT_KINDS:
            raise UsageError(f"--input {input_path}: unsupported input type (expected .txt, .json or .jsonl)")
        return [input_path]
    excluded = {os.path.realpath(d) for d in exclude_dirs}
    files = []
    for root, dirs, names in os.walk(input_path):
        dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(root, d)) not in excluded]
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and os.path.splitext(n)[1].lower() in INPUT_KINDS:
                files.append(p)
    return sorted(files, key=path_key)


def collect_strings(value, keys, selected, out):
    """prepare.cpp's collect_strings: the non-empty strings in document order (all, or those
    below an object member whose key is in `keys`)."""
    if isinstance(value, str):
        if selected and value:
            out.append(value)
    elif isinstance(value, list):
        for item in value:
            collect_strings(item, keys, selected, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            collect_strings(v, keys, selected or k in keys, out)


def file_documents(path, keys):
    kind = INPUT_KINDS[os.path.splitext(path)[1].lower()]
    if kind == "yaml":
        raise UsageError(f"--input {path}: YAML is not supported by this reference (expected .txt, .json, .jsonl)")
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"--input {path}: not valid UTF-8 at byte {e.start} (the HF reference needs text)") from e
    if kind == "text":
        return [text] if text else []
    docs = []
    try:
        if kind == "json":
            collect_strings(json.loads(text), keys, not keys, docs)
        else:
            for line in text.split("\n"):
                if line.strip(" \t\r"):
                    collect_strings(json.loads(line), keys, not keys, docs)
    except json.JSONDecodeError as e:
        raise UsageError(f"--input {path}: invalid JSON: {e}") from e
    return docs


def read_documents(input_path, keys, exclude_dirs):
    """[(file relative to the input, text)] in fsdpp's document order."""
    docs = []
    for path in list_inputs(input_path, exclude_dirs):
        rel = os.path.relpath(path, input_path) if os.path.isdir(input_path) else os.path.basename(path)
        docs += [(rel, d) for d in file_documents(path, keys)]
    if not docs:
        raise UsageError(f"--input {input_path}: no documents (expected non-empty .txt, .json or .jsonl files)")
    return docs


def tokenize_documents(tok, sep, docs):
    """Per document: [separator] + encode(text, add_special_tokens=False), int32."""
    return [np.asarray([sep, *tok.encode(text, add_special_tokens=False).ids], dtype="<i4") for _, text in docs]


def summary(docs, ids):
    total = hashlib.sha256()
    per_document = []
    for i, ((name, _), a) in enumerate(zip(docs, ids, strict=True)):
        b = a.astype("<i4").tobytes()
        total.update(b)
        per_document.append({"index": i, "file": name, "ids_sha256": hashlib.sha256(b).hexdigest(), "count": len(a)})
    return {
        "documents": len(ids),
        "tokens": int(sum(len(a) for a in ids)),
        "sha256": total.hexdigest(),
        "per_document": per_document,
    }


# ----------------------------------------------------------------------------------------
# --compare-tok: fsdpp shards against the reference ids
# ----------------------------------------------------------------------------------------


def shard_document_count(path):
    """The header's document_count (TOKENS.md: uint64 at offset 24)."""
    with open(path, "rb") as f:
        head = f.read(64)
    return struct.unpack_from("<Q", head, 24)[0]


def prepare_options(args, shard_paths):
    """start_idx, end_idx, eval_fraction, shard_tokens, json_keys: the flags, else the
    shards' manifest.json, else data prepare's defaults."""
    manifest = {}
    dirs = {os.path.dirname(os.path.abspath(p)) for p in shard_paths}
    mpath = os.path.join(next(iter(dirs)), "manifest.json")
    if len(dirs) == 1 and os.path.isfile(mpath):
        try:
            with open(mpath, encoding="utf-8") as f:
                m = json.load(f)
            if m.get("format") != "fsdpp.data-manifest" or m.get("version") != 1:
                raise ValueError(f"format {m.get('format')!r} version {m.get('version')!r}")
            manifest = m["options"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise UsageError(f"{mpath}: unreadable manifest (expected fsdpp.data-manifest version 1): {e}") from e

    def pick(flag, key, default):
        value = getattr(args, flag)
        if value is not None:
            return value
        return manifest[key] if manifest.get(key) is not None else default

    return {
        "start_idx": int(pick("start_idx", "start_idx", 0)),
        "end_idx": pick("end_idx", "end_idx", None),
        "eval_fraction": float(pick("eval_fraction", "eval_fraction", 0.0)),
        "shard_tokens": pick("shard_tokens", "shard_tokens", None),
        "json_keys": pick("json_keys", "json_keys", []),
        "source": "manifest.json and flags" if manifest else "flags and defaults",
    }


def context_text(tok, ids, pos, width=8):
    lo, hi = max(0, pos - width), min(len(ids), pos + width + 1)
    return repr(tok.decode([int(i) for i in ids[lo:hi]], skip_special_tokens=False))


def token_name(tok, i):
    return "(end of the shards)" if i is None else f"{i} {tok.id_to_token(i)!r}"


def report_first_difference(split, tok, got, expected, expected_docs, docs, diff):
    n = min(len(got), len(expected))
    pos = int(diff[0]) if len(diff) else n
    if pos >= len(expected):  # every expected id matched, and the shards hold more
        print(
            f"{split}: MISMATCH: {len(expected)} tokens expected, the shards hold {len(got)}; extra ids: "
            f"{got[pos : pos + 8].tolist()}"
        )
        return
    counts = [len(a) for a in expected_docs]
    starts = np.cumsum([0, *counts])
    d = int(np.searchsorted(starts, pos, side="right") - 1)
    index, (name, _) = docs[d]
    within = pos - int(starts[d])
    have = int(got[pos]) if pos < len(got) else None
    print(
        f"{split}: MISMATCH at token {pos} of the split: document {index} ({name}), position {within} of its "
        f"{counts[d]} ids: expected {token_name(tok, int(expected[pos]))}, got {token_name(tok, have)}"
    )
    print(f"  expected text around it: {context_text(tok, expected_docs[d], within)}")
    print(f"  got text around it:      {context_text(tok, got[int(starts[d]) : int(starts[d + 1])], within)}")
    print(f"  {len(diff)} of the first {n} positions differ; {len(expected)} tokens expected, {len(got)} in the shards")


def compare_split(split, shard_paths, expected_docs, docs, tok, shard_tokens):
    """Whether the split's shards hold exactly the documents' ids, concatenated in order."""
    try:
        got_parts = [np.asarray(torch_peer.open_token_file(p, "auto"), dtype=np.int64) for p in shard_paths]
    except torch_peer.PeerError as e:
        raise UsageError(f"--compare-tok {e}") from e
    got = np.concatenate(got_parts)
    expected = np.concatenate(expected_docs).astype(np.int64) if expected_docs else np.zeros(0, np.int64)
    n = min(len(got), len(expected))
    diff = np.nonzero(got[:n] != expected[:n])[0]
    ok = not len(diff) and len(got) == len(expected)
    if not ok:
        report_first_difference(split, tok, got, expected, expected_docs, docs, diff)
    names = [os.path.basename(p) for p in shard_paths]
    if names != [f"{split}_{i:06d}.tok" for i in range(len(names))]:
        ok = False
        print(f"{split}: shard files {names} (expected {split}_000000.tok, {split}_000001.tok, ..., none missing)")
    if shard_tokens is not None:
        for p, part in zip(shard_paths[:-1], got_parts[:-1], strict=True):
            if len(part) != shard_tokens:
                ok = False
                print(f"{p}: {len(part)} tokens (expected shard_tokens {shard_tokens} in every shard but the last)")
    if ok:  # each header counts the documents that start in its shard
        doc_starts = np.cumsum([0, *[len(a) for a in expected_docs[:-1]]])
        first = 0
        for p, part in zip(shard_paths, got_parts, strict=True):
            want = int(np.count_nonzero((doc_starts >= first) & (doc_starts < first + len(part))))
            have = shard_document_count(p)
            if want != have:
                ok = False
                print(f"{p}: header document_count {have}, expected {want} documents starting in it")
            first += len(part)
    if ok:
        print(
            f"{split}: OK, {len(expected_docs)} documents, {len(got)} tokens in {len(names)} shard(s), every id equal"
        )
    return ok


def run_compare(args, tok, documents):
    by_split = {"train": [], "eval": []}
    for p in sorted(args.compare_tok, key=os.path.basename):
        name = os.path.basename(p)
        if not os.path.isfile(p):
            raise UsageError(f"--compare-tok {p}: no such file")
        if name.split("_", 1)[0] not in by_split or not name.endswith(".tok"):
            raise UsageError(f"--compare-tok {p}: expected a shard named train_NNNNNN.tok or eval_NNNNNN.tok")
        by_split[name.split("_", 1)[0]].append(p)
    opts = prepare_options(args, args.compare_tok)
    f = opts["eval_fraction"]
    if not 0 <= f < 1:
        raise UsageError(f"--eval-fraction {f}: expected a fraction in [0, 1)")
    docs_all, ids_all = documents(opts["json_keys"])
    start, end = opts["start_idx"], opts["end_idx"]
    end = len(docs_all) if end is None else int(end)
    if not 0 <= start < end <= len(docs_all):
        raise UsageError(f"--start-idx/--end-idx [{start}, {end}): outside the {len(docs_all)} documents of the input")
    split_docs = {"train": ([], []), "eval": ([], [])}
    for i in range(end - start):
        # prepare.cpp: i goes to eval iff floor((i+1)f) > floor(if), in doubles.
        names, ids = split_docs["eval" if math.floor((i + 1) * f) > math.floor(i * f) else "train"]
        names.append((start + i, docs_all[start + i]))
        ids.append(ids_all[start + i])
    print(
        f"compare: documents [{start}, {end}) of {len(docs_all)}, eval_fraction {f:g}, "
        f"shard_tokens {opts['shard_tokens']} ({opts['source']})"
    )
    ok = True
    for split in ("train", "eval"):
        names, ids = split_docs[split]
        if by_split[split]:
            ok = compare_split(split, by_split[split], ids, names, tok, opts["shard_tokens"]) and ok
        elif split == "train":
            print(f"train: no train_*.tok shard given, {len(ids)} documents expected")
            ok = False
    return ok


# ----------------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"hf_tokenize: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer", required=True, help="GPT-2 folder (encoder.json + vocab.bpe) or tokenizer.json")
    p.add_argument("--input", required=True, help="file or folder of .txt / .json / .jsonl documents")
    p.add_argument("--out", help="write the JSON summary here instead of stdout")
    p.add_argument("--compare-tok", nargs="+", metavar="SHARD", help="fsdpp .tok shards to check against the ids")
    p.add_argument("--json-keys", nargs="*", default=None, help="as data prepare: only strings below these keys")
    p.add_argument("--eval-fraction", type=float, default=None, help="with --compare-tok (default: manifest, else 0)")
    p.add_argument("--start-idx", type=int, default=None, help="with --compare-tok (default: manifest, else 0)")
    p.add_argument("--end-idx", type=int, default=None, help="with --compare-tok (default: manifest, else all)")
    p.add_argument("--shard-tokens", type=int, default=None, help="with --compare-tok (default: manifest, else any)")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    tok, desc = load_hf_tokenizer(args.tokenizer)
    sep, sep_name = separator_id(tok, args.tokenizer)
    # fsdpp does not read its output folder when it lies inside the input; neither do we.
    exclude = {os.path.dirname(os.path.abspath(p)) for p in (args.compare_tok or [])}
    cache = {}

    def documents(keys):
        k = tuple(keys or ())
        if k not in cache:
            docs = read_documents(args.input, set(k), exclude)
            cache[k] = (docs, tokenize_documents(tok, sep, docs))
        return cache[k]

    docs, ids = documents(args.json_keys)
    record = summary(docs, ids)
    record["tokenizer"] = {"path": args.tokenizer, "reference": desc, "separator": {"id": sep, "token": sep_name}}
    text = json.dumps(record, indent=1) + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text)
    elif not args.compare_tok:
        sys.stdout.write(text)
    if not args.compare_tok:
        return 0
    return 0 if run_compare(args, tok, documents) else EXIT_MISMATCH


def cli(argv):
    """main, with a usage error as one line on stderr and exit 2."""
    try:
        return main(argv)
    except UsageError as e:
        print(f"hf_tokenize: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    from serve import main_or_serve

    sys.exit(main_or_serve(cli))
