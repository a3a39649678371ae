#!/usr/bin/env python3
"""The float64 judge of harness/references/hf_models.py, judged: it must fail what is wrong.

On one tiny model (default: the tied Llama, whose logits are the largest and so the judge's
bar the widest), with the references the real check computes (transformers' fp32 sdpa and
its float64 forward) and the same judge_logits and judge_rule, five candidates in fsdpp's place:

  - fsdpp's own logits (`fsdpp eval --logits-out`)                                must pass;
  - fsdpp's logits with one logit moved by 1e-4                                    must fail;
  - transformers' fp32 logits with the right causal mask given as a 4D mask       must pass
    (the control: the custom-mask path itself changes nothing);
  - transformers' fp32 logits with a mask that lets position t also see t+1       must fail;
  - transformers' fp32 logits with a sliding window of 4 tokens                   must fail.

Each case prints one JSON line with its figures; exit 1 if any verdict is not the expected
one, 2 for bad usage.

Usage: hf_judge_self_test.py FSDPP_BINARY [--arch ARCH]
"""

import argparse
import os
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "harness", "references"))

import hf_models as H  # noqa: E402  (after the sys.path entry); sets transformers offline
import torch  # noqa: E402

SEQ_LEN = 32
LOGIT_SHIFT = 1e-4


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"hf_judge_self_test.py: {' '.join(cmd)} failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def prepare(fsdpp, arch, work):
    """A model folder (hf_models.py make), its tokens and fsdpp's logits file."""
    _, _, tokenizer_kind = H.ARCHS[arch]()
    assets = H.assets_dir()
    text = os.path.join(work, "text")
    os.makedirs(text)
    with open(os.path.join(assets, "corpora", "kjv-new-testament", "1182.txt"), "rb") as src:
        with open(os.path.join(text, "1182.txt"), "wb") as dst:
            dst.write(src.read())
    tokenizer = (
        os.path.join(assets, "gpt2")
        if tokenizer_kind == "gpt2"
        else os.path.join(assets, "hf-llama-spm", "tokenizer.json")
    )
    run(
        [
            fsdpp,
            "data",
            "prepare",
            "--input",
            text,
            "--output",
            os.path.join(work, "tokens"),
            "--tokenizer",
            tokenizer,
            "--eval-fraction",
            "0",
        ]
    )
    model_dir = os.path.join(work, arch)
    run(
        [
            sys.executable,
            os.path.join(REPO_ROOT, "harness", "references", "hf_models.py"),
            "make",
            "--arch",
            arch,
            "--out",
            model_dir,
            "--seed",
            "1",
        ]
    )
    data = os.path.join(work, "tokens", "train_000000.tok")
    logits_file = os.path.join(work, "fsdpp.safetensors")
    run([fsdpp, "eval", "--model", model_dir, "--data", data, "--seq-len", str(SEQ_LEN), "--logits-out", logits_file])
    return model_dir, data, logits_file


def masked_logits(model, input_ids, allowed, batch_size=8):
    """transformers' fp32 logits with a 4D additive mask [B, 1, T, T] (masking_utils returns a
    4D mask as it is): 0 where allowed[t, s] (query t may see key s), the dtype's lowest
    value elsewhere."""
    mask = torch.full(allowed.shape, torch.finfo(torch.float32).min).masked_fill(allowed, 0.0)
    out = []
    with torch.no_grad():
        for first in range(0, input_ids.shape[0], batch_size):
            ids = input_ids[first : first + batch_size]
            m = mask.expand(ids.shape[0], 1, *allowed.shape)
            out.append(model(input_ids=ids, attention_mask=m).logits.float())
    return torch.cat(out)


def shifted_logit(candidate, exact):
    """candidate's logits with one logit moved by LOGIT_SHIFT: the one fsdpp already has
    furthest from float64, moved towards and past it, which leaves the smallest error a
    1e-4 change can leave (1e-4 less its own error)."""
    logits = candidate["logits"].clone()
    flat = logits.view(-1)
    err = flat.double() - exact.reshape(-1)
    i = int(err.abs().argmax())
    flat[i] -= LOGIT_SHIFT if err[i] > 0 else -LOGIT_SHIFT
    moved = abs(float(flat[i]) - float(candidate["logits"].view(-1)[i]))
    return {"logits": logits, "input_ids": candidate["input_ids"]}, i, moved


def main(argv):
    p = argparse.ArgumentParser(prog="hf_judge_self_test.py", description=__doc__.split("\n\n")[0])
    p.add_argument("fsdpp", help="the fsdpp binary")
    p.add_argument("--arch", default="llama-tied", choices=sorted(a for a in H.ARCHS if a != "qwen2-sliding"))
    args = p.parse_args(argv)
    if not os.access(args.fsdpp, os.X_OK):
        print(f"hf_judge_self_test.py: {args.fsdpp}: not an executable (expected the fsdpp binary)", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="hf_judge_self_test.") as work:
        model_dir, data_path, logits_file = prepare(args.fsdpp, args.arch, work)
        # The references exactly as hf_models.py logits --compare computes them.
        model = H.load_model(model_dir, "sdpa")
        window_args = argparse.Namespace(data=data_path, seq_len=SEQ_LEN, max_windows=None)
        data, windows = H.open_windows(window_args, model)
        logits, input_ids = H.window_logits(model, data, windows, SEQ_LEN, 8)
        hf32 = {"logits": logits, "input_ids": input_ids}
        exact, _ = H.fp64_window_logits(model, data, windows, SEQ_LEN, 8)
        rule = H.judge_rule(model.config)
        fsdpp = H.read_logits_file(logits_file, "fsdpp eval --logits-out")

        shifted, index, moved = shifted_logit(fsdpp, exact)
        t = torch.arange(SEQ_LEN)
        causal = t[None, :] <= t[:, None]  # [query, key]
        cases = [
            ("fsdpp's logits", fsdpp, True, {}),
            (f"fsdpp's logits, one moved by {LOGIT_SHIFT:g}", shifted, False, {"index": index, "moved_by": moved}),
            ("transformers fp32, right causal mask as 4D", masked_logits(model, input_ids, causal), True, {}),
            (
                "transformers fp32, t also sees t+1",
                masked_logits(model, input_ids, t[None, :] <= t[:, None] + 1),
                False,
                {},
            ),
            (
                "transformers fp32, sliding window of 4",
                masked_logits(model, input_ids, causal & (t[:, None] - t[None, :] < 4)),
                False,
                {},
            ),
        ]
        failed = 0
        for name, candidate, expect_ok, extra in cases:
            if not isinstance(candidate, dict):
                candidate = {"logits": candidate, "input_ids": input_ids}
            check = H.judge_logits(candidate, hf32, exact, rule)
            as_expected = check["ok"] == expect_ok
            failed += not as_expected
            H.emit(
                {
                    "arch": args.arch,
                    "case": name,
                    "expected_ok": expect_ok,
                    "as_expected": as_expected,
                    **extra,
                    "check": check,
                }
            )
    print(f"hf_judge_self_test.py: {len(cases) - failed} of {len(cases)} cases as expected", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
