#!/usr/bin/env python3
"""Hugging Face reference for `fsdpp train`: the per-step losses fsdpp should log.

One process trains a transformers model (AutoModelForCausalLM, fp32, CPU by default) with
torch.optim.AdamW and torch.nn.utils.clip_grad_norm_ on exactly the global batches of
`fsdpp train --nproc N` and prints one JSON line {"losses": [...], "grad_norms": [...],
"lrs": [...], ...}: per optimizer step, metrics.jsonl's "loss", "grad_norm" and "lr"
(core/train/METRICS.md). --compare-metrics RUN/metrics.jsonl then checks fsdpp's run
against them (exit 1 when a loss differs by more than --rtol, relative).

What is mirrored, and where it is defined:
- Windows: window w = tokens [w*T, w*T + T] of the --data spec (inputs its first T,
  targets its last T; core/data/token_dataset.h). A step takes G = world x batch x accum
  consecutive positions of fsdpp's window stream (core/data/sampler.h: splitmix64
  Fisher-Yates per (seed, epoch), or file order with --no-shuffle); position offset
  (micro * world + rank) * batch + b is row b of rank `rank`'s micro-step `micro`. The
  stream and the data reader are harness/peers/torch_peer.py's (Sampler with one rank and
  batch G yields the global batch in position order; TokenData), not second copies.
- Loss and gradient (core/train/trainer.h): each (micro-step, rank) chunk's summed fp32
  cross-entropy is backpropagated with scale 1 / (world x batch x T x accum), the
  gradient FSDP's averaging over ranks leaves; the logged loss is the chunks' sums (as
  doubles) over all G x T targets, before the update.
- LR (core/optim/lr_schedule.h, torch_peer.lr_at) over --max-steps steps (or
  ceil(epochs x windows / G)); AdamW (core/optim/adamw.h): torch.optim.AdamW with fsdpp's
  betas, eps, and weight decay on parameters with 2+ dimensions only (a tied weight once);
  clipping (core/optim/gradients.h): clip_grad_norm_'s rule, coef = max / (norm + 1e-6)
  below 1; the logged grad_norm is the norm before clipping (measured even with
  --grad-clip 0). "grad_norms" here is that norm exactly (each fp32 gradient squared and
  summed in fp64); "grad_norms_torch" is clip_grad_norm_'s own fp32 value, which clips.
  Both fsdpp and torch take per-tensor norms in fp32 (clip_grad_norm_'s semantics), and
  on CPU that loses up to ~1e-3 relative on a large embedding gradient (measured: a
  50257 x 64 tied GPT-2 embedding), so compare grad_norm loosely (--grad-norm-rtol 1e-3)
  and losses tightly. Dropout is off (fsdpp's models have none): every *pdrop / *dropout
  field of the config is set to 0.

Same initial weights in both (the route the tests use):
    hf_train.py --write-init INIT --init-config '{"model_type": "gpt2", "vocab_size": 50257,
        "n_positions": 256, "n_embd": 64, "n_layer": 2, "n_head": 4}' --seed 1
  writes a transformers-initialised model with save_pretrained (config.json +
  model.safetensors; fsdpp's tiny GPT-2 preset's shape). Then
    fsdpp train --model INIT --data D --nproc 2 --strategy full_shard ... --max-steps 20
    hf_train.py --model INIT --data D --world-size 2 ... --max-steps 20 \\
        --compare-metrics runs/run/metrics.jsonl
  (`fsdpp train --from-scratch` cannot export its initial weights: it needs --max-steps
  >= 1 or --num-epochs > 0 and exports after training. Any folder fsdpp exports to
  RUN/hf is a valid --model too, as the initial weights of a further run.)

Exit codes: 0 done (and, with --compare-metrics, every loss within --rtol), 1 a
comparison failed, 2 bad usage or input.
"""

import argparse
import json
import math
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "peers"))
import torch_peer  # Sampler, TokenData, lr_at: fsdpp's window order, data spec and LR schedule

EXIT_MISMATCH = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad usage or input: one line on stderr, exit 2."""


# ----------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------


def without_dropout(config):
    """fsdpp's models have no dropout: zero every dropout probability of an HF config."""
    for key, value in config.to_dict().items():
        if key.endswith(("pdrop", "dropout")) and isinstance(value, float):
            setattr(config, key, 0.0)
    return config


def load_model(path, device):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stdout/stderr carry only the record and errors

    if not os.path.isfile(os.path.join(path, "config.json")):
        raise UsageError(f"--model {path}: no config.json (expected a Hugging Face model folder)")
    try:
        config = without_dropout(AutoConfig.from_pretrained(path, local_files_only=True))
        model, info = AutoModelForCausalLM.from_pretrained(
            path, config=config, dtype=torch.float32, local_files_only=True, output_loading_info=True
        )
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--model {path}: transformers cannot load it: {e}") from e
    # A weight missing from the folder would be initialised at random: not the same start.
    # (A tied LM head is stored once, under the embedding's name, as fsdpp exports it.)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    missing = [k for k in info.get("missing_keys", []) if not (tied and k.endswith("lm_head.weight"))]
    if missing or info.get("mismatched_keys"):
        raise UsageError(f"--model {path}: weights missing or mis-shaped: {missing or info['mismatched_keys']}")
    return model.to(device).train()


def write_init(args):
    """--write-init: a freshly initialised model from --init-config, saved with save_pretrained."""
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    raw = args.init_config
    if raw is None:
        raise UsageError("--write-init needs --init-config (a config.json path or inline JSON)")
    try:
        if os.path.isfile(raw):
            with open(raw, encoding="utf-8") as f:
                fields = json.load(f)
        else:
            fields = json.loads(raw)
        model_type = fields.pop("model_type")
        config = without_dropout(AutoConfig.for_model(model_type, **fields))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--init-config {raw}: expected an HF config (JSON object with model_type): {e}") from e
    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    hf_logging.disable_progress_bar()
    model.save_pretrained(args.write_init)
    params = sum(p.numel() for p in model.parameters())
    print(json.dumps({"wrote": args.write_init, "model_type": model_type, "parameters": params, "seed": args.seed}))
    return 0


def model_limits(model):
    c = model.config
    positions = getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None)
    return int(c.vocab_size), int(positions) if positions else None


# ----------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------


def adamw(model, args):
    """fsdpp's make_adamw: weight decay on 2-D+ parameters, none on biases and norms."""
    params = list(model.parameters())  # unique tensors: a tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        g
        for g in ({"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0})
        if g["params"]
    ]
    return params, torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps)


def summed_loss(model, inputs, targets):
    """train_step.cpp's training_loss: sum of next-token cross-entropy over the targets, fp32;
    for a mixture of experts whose config sets output_router_logits, plus transformers' own
    load-balancing loss (its aux_loss, computed by load_balancing_loss_func) times
    router_aux_loss_coef, times the targets' count: the micro-batch's mean of transformers'
    loss (mean cross-entropy + coef x aux_loss) once scaled by backward_scale."""
    out = model(input_ids=inputs, use_cache=False)
    logits = out.logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="sum")
    aux = getattr(out, "aux_loss", None)
    if aux is not None:
        loss = loss + model.config.router_aux_loss_coef * aux * targets.numel()
    return loss


def train(args):
    device = torch.device(args.device)
    model = load_model(args.model, device)
    vocab, positions = model_limits(model)
    seq_len = args.seq_len or positions
    if not seq_len:
        raise UsageError(f"--model {args.model}: the config names no positions; give --seq-len")
    if positions and seq_len > positions:
        raise UsageError(f"--seq-len {seq_len} is above the model's {positions} positions")
    try:
        data = torch_peer.TokenData.open(args.data, "auto")
    except torch_peer.PeerError as e:  # its messages name the flag --tokens
        raise UsageError(str(e).replace("--tokens", "--data", 1)) from e
    windows = data.num_windows(seq_len)
    if windows < 1:
        raise UsageError(f"--data {args.data}: {data.num_tokens} tokens, not one window of {seq_len} + 1")
    top = max(int(np.max(a)) for a in data.arrays)
    if top >= vocab:
        raise UsageError(f"--data {args.data}: token id {top} is outside the model's vocabulary of {vocab}")

    world, batch, accum = args.world_size, args.batch_size, args.grad_accum_steps
    global_batch = world * batch * accum
    total_steps = args.max_steps or math.ceil(args.num_epochs * windows / global_batch)
    # The global batch of step s in position order: torch_peer's Sampler with one rank of
    # batch G reads positions s*G .. s*G + G - 1 of fsdpp's stream.
    sampler = torch_peer.Sampler(windows, global_batch, 1, 0, not args.no_shuffle, args.seed)
    params, optimizer = adamw(model, args)
    backward_scale = 1.0 / (world * batch * seq_len * accum)
    tokens_per_step = global_batch * seq_len

    losses, grad_norms, grad_norms_torch, lrs = [], [], [], []
    for step in range(total_steps):
        lr = torch_peer.lr_at(step, args.lr, args.min_lr, args.warmup_steps, total_steps, args.lr_schedule)
        for g in optimizer.param_groups:
            g["lr"] = lr
        step_windows = sampler.step_windows(step)
        loss_sum = 0.0
        for micro in range(accum):
            for rank in range(world):
                first = (micro * world + rank) * batch
                xs, ys = data.windows(step_windows[first : first + batch], seq_len)
                x = torch.from_numpy(xs).to(device)
                y = torch.from_numpy(ys).to(device)
                loss = summed_loss(model, x, y)
                loss_sum += loss.item()
                (loss * backward_scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        # The norm as a reference: each fp32 gradient squared and summed in fp64. (torch's
        # fp32 norm, which clip_grad_norm_ clips with, is off by ~1e-6 relative here.)
        norm_fp64 = math.sqrt(sum(g.double().pow(2).sum().item() for g in grads))
        if args.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, args.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm(grads)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss_sum / tokens_per_step)
        grad_norms.append(norm_fp64)
        grad_norms_torch.append(float(norm))
        lrs.append(lr)
        if args.verbose:
            print(
                f"hf_train: step {step + 1}/{total_steps} loss {losses[-1]:.6f} grad_norm {grad_norms[-1]:.6f} "
                f"lr {lr:.3e}",
                file=sys.stderr,
            )
    return {
        "losses": losses,
        "grad_norms": grad_norms,
        "grad_norms_torch": grad_norms_torch,
        "lrs": lrs,
        "steps": total_steps,
        "seq_len": seq_len,
        "global_batch": global_batch,
        "train_windows": windows,
        "model": args.model,
        "torch_version": torch.__version__,
    }


# ----------------------------------------------------------------------------------------
# --compare-metrics
# ----------------------------------------------------------------------------------------


def read_metrics(path):
    """(last "run" record, {step: last "train" record}) of fsdpp's metrics.jsonl (a resumed
    run repeats steps; the later record counts)."""
    run, by_step = None, {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                record = json.loads(line)
                if record.get("kind") == "run" and (
                    record.get("format") != "fsdpp.metrics" or record.get("version") != 1
                ):
                    raise UsageError(f"--compare-metrics {path}:{number}: expected format fsdpp.metrics version 1")
                if record.get("kind") == "run":
                    run = record
                if record.get("kind") == "train":
                    by_step[int(record["step"])] = record
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UsageError(f"--compare-metrics {path}: unreadable metrics.jsonl: {e}") from e
    if run is None:
        raise UsageError(f'--compare-metrics {path}: no "run" record (expected fsdpp\'s metrics.jsonl)')
    return run, by_step


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(result, path, rtol, grad_norm_rtol):
    run, records = read_metrics(path)
    steps = result["steps"]
    for key in ("total_steps", "global_batch", "seq_len", "train_windows"):
        mine = result["steps"] if key == "total_steps" else result[key]
        if run.get(key) != mine:
            print(f"compare: {path}: the run's {key} is {run.get(key)}, this one's {mine}: not the same training")
            return False
    missing = [s for s in range(1, steps + 1) if s not in records]
    if missing:
        print(f"compare: {path} lacks train records for steps {missing[:10]} (expected 1..{steps})")
        return False
    ok = True
    rows = []
    for s in range(1, steps + 1):
        r = records[s]
        rows.append(
            {
                "step": s,
                "fsdpp_loss": r["loss"],
                "hf_loss": result["losses"][s - 1],
                "loss_rel": relative(r["loss"], result["losses"][s - 1]),
                "grad_norm_rel": relative(r["grad_norm"], result["grad_norms"][s - 1]),
                "lr_rel": relative(r["lr"], result["lrs"][s - 1]) if result["lrs"][s - 1] else abs(r["lr"]),
            }
        )
    worst = max(rows, key=lambda row: row["loss_rel"])
    worst_norm = max(rows, key=lambda row: row["grad_norm_rel"])
    for row in rows:
        print(
            f"step {row['step']:3d}: fsdpp {row['fsdpp_loss']:.9f} hf {row['hf_loss']:.9f} "
            f"rel {row['loss_rel']:.2e} | grad_norm rel {row['grad_norm_rel']:.2e}"
        )
    bad_lr = [row["step"] for row in rows if row["lr_rel"] > 1e-12]
    if bad_lr:
        ok = False
        print(f"compare: the learning rate differs at steps {bad_lr[:10]}: not the same schedule (check the flags)")
    if worst["loss_rel"] > rtol:
        ok = False
        first = next(row for row in rows if row["loss_rel"] > rtol)
        print(
            f"compare: FAIL: loss differs by {worst['loss_rel']:.3e} relative at step {worst['step']} "
            f"(tolerance {rtol:g}; first above it: step {first['step']})"
        )
    if grad_norm_rtol is not None and worst_norm["grad_norm_rel"] > grad_norm_rtol:
        ok = False
        print(
            f"compare: FAIL: grad_norm differs by {worst_norm['grad_norm_rel']:.3e} relative at step "
            f"{worst_norm['step']} (tolerance {grad_norm_rtol:g})"
        )
    print(
        f"compare: {steps} steps, max loss rel diff {worst['loss_rel']:.3e} (step {worst['step']}), max grad_norm "
        f"rel diff {worst_norm['grad_norm_rel']:.3e} (step {worst_norm['step']}): {'OK' if ok else 'MISMATCH'}"
    )
    return ok


# ----------------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        print(f"hf_train: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse_args(argv):
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="initial weights: a transformers-loadable folder")
    p.add_argument("--data", help="training tokens: fsdpp's data spec (files, folders, patterns, commas)")
    # fsdpp train's flags, names and defaults (harness/cli/train_command.cpp, train_config.h).
    p.add_argument("--seq-len", type=int, default=0, help="tokens per window (0: the model's positions)")
    p.add_argument("--batch-size", type=int, default=8, help="windows per rank per micro-step")
    p.add_argument("--world-size", type=int, default=1, help="fsdpp's --nproc: ranks whose batches to train on")
    p.add_argument("--grad-accum-steps", type=int, default=1, help="micro-steps per optimizer step")
    p.add_argument("--max-steps", type=int, default=0, help="optimizer steps")
    p.add_argument("--num-epochs", type=float, default=0, help="epochs (instead of --max-steps)")
    p.add_argument("--lr", "--max-lr", type=float, default=3e-4, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=0.0, help="learning rate at the end of the decay")
    p.add_argument("--warmup-steps", type=int, default=0, help="linear warmup steps")
    p.add_argument("--lr-schedule", choices=("cosine", "linear", "constant"), default="cosine")
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay for 2-D+ parameters")
    p.add_argument("--adam-beta1", type=float, default=0.9)
    p.add_argument("--adam-beta2", type=float, default=0.999)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument("--grad-clip", type=float, default=0.0, help="clip the global gradient 2-norm (0: off)")
    p.add_argument("--seed", type=int, default=1234, help="data order seed (and --write-init's init seed)")
    p.add_argument("--no-shuffle", action="store_true", help="windows in file order")
    # This script's own.
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:N)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--out", help="also write the JSON record to this file")
    p.add_argument("--compare-metrics", metavar="METRICS_JSONL", help="fsdpp's RUN/metrics.jsonl to check")
    p.add_argument("--rtol", type=float, default=1e-5, help="with --compare-metrics: largest relative loss difference")
    p.add_argument("--grad-norm-rtol", type=float, default=None, help="with --compare-metrics: also check grad_norm")
    p.add_argument("--verbose", action="store_true", help="a line per step on stderr")
    p.add_argument("--write-init", metavar="DIR", help="write a fresh model from --init-config to DIR, and exit")
    p.add_argument("--init-config", help="with --write-init: an HF config.json path or inline JSON")
    args = p.parse_args(argv)
    if args.write_init:
        return args
    for flag in ("model", "data"):
        if not getattr(args, flag):
            p.error(f"--{flag} is required")
    checks = [
        (args.seq_len >= 0, "--seq-len must be >= 0 (0: the model's positions)"),
        (args.batch_size >= 1, "--batch-size must be at least 1"),
        (args.world_size >= 1, "--world-size must be at least 1"),
        (args.grad_accum_steps >= 1, "--grad-accum-steps must be at least 1"),
        ((args.max_steps > 0) != (args.num_epochs > 0), "give exactly one of --max-steps N and --num-epochs E"),
        (args.max_steps >= 0 and args.num_epochs >= 0, "--max-steps and --num-epochs must be positive"),
        (args.lr > 0, "--lr must be > 0"),
        (0 <= args.min_lr <= args.lr, "--min-lr must be in [0, --lr]"),
        (args.warmup_steps >= 0, "--warmup-steps must be >= 0"),
        (args.grad_clip >= 0, "--grad-clip must be >= 0 (0: off)"),
        (args.weight_decay >= 0, "--weight-decay must be >= 0"),
        (args.threads >= 1, "--threads must be at least 1"),
        (args.seed >= 0, "--seed must be >= 0 (fsdpp's seed is unsigned)"),
    ]
    for ok, message in checks:
        if not ok:
            p.error(message)
    return args


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.write_init:
        return write_init(args)
    result = train(args)
    line = json.dumps(result)
    print(line, flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(line + "\n")
    if args.compare_metrics:
        return 0 if compare(result, args.compare_metrics, args.rtol, args.grad_norm_rtol) else EXIT_MISMATCH
    return 0


def cli(argv):
    """main, with a usage error as one line on stderr and exit 2."""
    try:
        return main(argv)
    except UsageError as e:
        print(f"hf_train: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    from serve import main_or_serve

    sys.exit(main_or_serve(cli))
