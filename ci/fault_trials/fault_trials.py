#!/usr/bin/env python3
"""Fault trials of `fsdpp train` (issue 27 item 3): rank death, crash during save, disk
full, corruption. Standard library only; run through ci/fault_trials.sh.

Every category drives the real CLI on a tiny from-scratch GPT-2 (vocabulary 64, 16 tokens
per window) and checks what the issue asks:

- rank_death: a random rank of a 2-4 rank run is SIGKILLed at a random moment; every
  surviving rank must exit non-zero by itself within --timeout-s + margin (else: a hang,
  killed and counted).
- crash_during_save: a --deterministic run with --ckpt-freq is SIGKILLed (all ranks, or one)
  at a random moment, synchronous and asynchronous saves alternately, then rerun with the
  same command (--resume auto); the rerun must resume from the newest complete checkpoint
  and end bitwise equal to the uninterrupted run; no committed checkpoint may be lost or
  left half-written.
- disk_full: a save into a small tmpfs (or under RLIMIT_FSIZE) must fail with one line naming
  the path and the cause; the previous checkpoint stays complete; no later save is logged.
- corruption: every file of a committed checkpoint flipped, truncated and deleted; inspect,
  export and an explicit --resume must fail with one line naming the file, never crash;
  --resume auto must skip the corrupt checkpoint saying why.

The JSON written is specified in ci/fault_trials/README.md (format "fsdpp.fault-trials",
version 1). Exit status: 0 every target met, 1 a target missed, 2 usage or setup error.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from results_file import write_json_atomically  # noqa: E402

FORMAT, VERSION = "fsdpp.fault-trials", 1
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The model and data of every trial: a few ms per step, a 1.5 MB checkpoint.
MODEL = [
    "--from-scratch",
    "--model-type",
    "gpt2",
    "--model-size",
    "tiny",
    "--vocab-size",
    "64",
    "--seq-len",
    "16",
    "--batch-size",
    "2",
    "--seed",
    "3",
    "--log-freq",
    "1",
    "--threads",
    "1",
]
RANK_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "FSDPP_LAUNCH_CHILD",
    "FSDPP_KILL_AFTER_STEP",
    "FSDPP_ATTACHED_TTY",
    "OMP_NUM_THREADS",
)


class SetupError(Exception):
    pass


def log(msg):
    print("[fault-trials %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


# ----------------------------------------------------------------------------- processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env():
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    env["OMP_NUM_THREADS"] = "1"
    return env


class Rank:
    """One process of a trial, its stdout/stderr in files."""

    def __init__(self, name, argv, env, folder, preexec=None):
        self.name = name
        self.out_path = os.path.join(folder, name + ".out")
        self.err_path = os.path.join(folder, name + ".err")
        self.out = open(self.out_path, "wb")
        self.err = open(self.err_path, "wb")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=self.out,
            stderr=self.err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec,
        )
        self.end = None

    @property
    def pid(self):
        return self.proc.pid

    def poll(self):
        rc = self.proc.poll()
        if rc is not None and self.end is None:
            self.end = time.monotonic()
            self.out.close()
            self.err.close()
        return rc

    def alive(self):
        return self.poll() is None

    def kill_group(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.poll()

    def stdout(self):
        try:
            with open(self.out_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stderr_lines(self):
        try:
            with open(self.err_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if line.strip()]


def wait_all(ranks, deadline):
    """Polls until every rank exited or the monotonic deadline; returns the ranks still running."""
    while True:
        running = [r for r in ranks if r.alive()]
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.02)


def exit_fields(rank):
    rc = rank.proc.returncode
    return {
        "exit_code": rc if rc is not None and rc >= 0 else None,
        "signal": signal.Signals(-rc).name if rc is not None and rc < 0 else None,
    }


def children_of(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def env_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            items = f.read().split(b"\0")
    except OSError:
        return {}
    out = {}
    for item in items:
        if b"=" in item:
            k, v = item.split(b"=", 1)
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


# ----------------------------------------------------------------------------- where a rank was

# Frames (innermost first) that say what the killed rank's main thread was doing.
PHASES = [
    (
        "startup",
        (
            "Communicator::connect",
            "resolve_world",
            "TCPStore",
            "preflight",
            "build_model",
            "ShardedModel::create",
            "DeferredInit",
            "resume_checkpoint",
            "restore_train_checkpoint",
            "find_latest_complete",
            "TokenDataset::open",
            "make_adamw",
            "AsyncCheckpointSaver::AsyncCheckpointSaver",
        ),
    ),
    (
        "save",
        (
            "TrainCheckpointer::save",
            "save_checkpoint",
            "AsyncCheckpointSaver::save",
            "sharded_state",
            "TrainCheckpointer::finish",
            "AsyncCheckpointSaver::wait",
        ),
    ),
    ("export", ("export_hf", "save_pretrained", "gather_full_parameters")),
    ("shutdown", ("Communicator::shutdown", "~Communicator", "__run_exit_handlers", "_dl_fini")),
    ("collective", ("CommWork::wait",)),
    ("backward", ("autograd::Engine", "_backward", "autograd::backward", "post_backward", "pre_backward")),
    (
        "optimizer",
        ("FusedAdamW", "adamw", "AdamW", "clip_grad_norm", "grad_norm", "GradScaler", "clear_gradients", "set_lr"),
    ),
    ("forward", ("summed_loss", "logits", "cross_entropy", "pre_forward", "call_with_hooks", "Gpt2")),
]


def sample_stack(pid):
    """All threads' stacks of a stopped process (eu-stack), or None."""
    if shutil.which("eu-stack") is None:
        return None
    try:
        r = subprocess.run(["eu-stack", "-p", str(pid), "-n", "40"], capture_output=True, text=True, timeout=20)
    except (subprocess.TimeoutExpired, OSError):
        return None
    return r.stdout


def frame_name(line):
    """The function of an eu-stack frame line, without address, arguments or template noise."""
    name = re.sub(r"^#\d+\s+0x[0-9a-f]+\s+(?:- 1\s+)?", "", line).strip()
    depth, out = 0, []
    for ch in name:  # drop (...) and <...> contents
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip()[:120]


def classify_stack(text, pid):
    """(phase of the main thread, its fsdpp frames innermost first, whether another thread is
    inside save_checkpoint)."""
    if not text:
        return "unknown", [], None
    threads, current = {}, None
    for line in text.splitlines():
        m = re.match(r"TID (\d+):", line)
        if m:
            current = int(m.group(1))
            threads[current] = []
        elif current is not None and line.startswith("#"):
            threads[current].append(frame_name(line))
    main = threads.get(pid, [])
    fsdpp_frames = [f for f in main if "fsdpp::" in f]
    table = dict(PHASES)
    phase = None
    # Startup, save and export hold collectives and compute of their own: the outermost
    # recognisable frame says which; inside a step the innermost part wins.
    for f in reversed(main):
        for name in ("startup", "save", "export", "shutdown"):
            if any(k in f for k in table[name]):
                phase = name
                break
        if phase:
            break
    if phase is None:
        for f in main:
            for name, keys in PHASES[4:]:
                if any(k in f for k in keys):
                    phase = name
                    break
            if phase:
                break
    if phase is None:
        if any("fsdpp::train::train" in f for f in main):
            phase = "step"
        elif not fsdpp_frames and not any(f == "main" for f in main):
            phase = "loading"  # before main(): the dynamic loader, static initialisers
        else:
            phase = "other"
    background_save = any(any("save_checkpoint" in f for f in frames) for tid, frames in threads.items() if tid != pid)
    return phase, fsdpp_frames[:8], background_save


# ----------------------------------------------------------------------------- campaign set-up


def write_tokens(path, count=20000, vocab=64, seed=11):
    rng = random.Random(seed)
    tokens, t = [], 1
    for _ in range(count):
        t = (t * 5 + 3 + rng.randint(0, 2)) % vocab
        tokens.append(t)
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, count  # llm.c's .bin header
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack("<%dH" % count, *tokens))


class Campaign:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.fsdpp = os.path.join(self.work, "fsdpp")
        shutil.copy2(args.fsdpp, self.fsdpp)  # the build folder may be rebuilt while we run
        self.tokens = os.path.join(self.work, "tokens.bin")
        write_tokens(self.tokens)
        self.rng = random.Random(args.seed)

    def train_argv(self, save_dir, name, steps, extra=()):
        return (
            [self.fsdpp, "train"]
            + MODEL
            + ["--data", self.tokens, "--max-steps", str(steps), "--save-dir", save_dir, "--experiment-name", name]
            + list(extra)
        )

    def launch(self, folder, argv, world, mode, port=None, preexec=None):
        """Starts the ranks of one run: a list of Rank (mode env/slurm: one per rank; nproc: the launcher)."""
        os.makedirs(folder, exist_ok=True)
        if mode == "nproc":
            return [Rank("launcher", argv + ["--nproc", str(world)], base_env(), folder, preexec)]
        if world == 1 and mode == "single":
            return [Rank("rank0", argv, base_env(), folder, preexec)]
        port = port or free_port()
        ranks = []
        for r in range(world):
            env = base_env()
            env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(port)
            if mode == "env":
                env.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world))
            else:  # slurm
                env.update(
                    SLURM_PROCID=str(r),
                    SLURM_NTASKS=str(world),
                    SLURM_LOCALID=str(r),
                    SLURM_NTASKS_PER_NODE=str(world),
                    SLURM_TASKS_PER_NODE=str(world),
                    SLURM_JOB_NODELIST="localhost",
                )
            ranks.append(Rank("rank%d" % r, argv, env, folder, preexec))
        return ranks

    def inspect(self, step_dir):
        """(complete, one-line reason) from `fsdpp checkpoint inspect`."""
        r = subprocess.run(
            [self.fsdpp, "checkpoint", "inspect", "--json", step_dir],
            capture_output=True,
            text=True,
            env=base_env(),
            timeout=120,
        )
        if r.returncode == 0:
            return True, ""
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else "exit %d" % r.returncode
        try:
            doc = json.loads(r.stdout)
            if doc.get("checksums") not in (None, "ok"):
                reason = doc["checksums"]
        except ValueError:
            pass
        return False, reason


def read_metrics(path):
    """Records of metrics.jsonl; a line cut by a kill is skipped (and counted)."""
    records, torn = [], 0
    try:
        with open(path, "rb") as f:
            for line in f.read().decode("utf-8", "replace").splitlines():
                try:
                    records.append(json.loads(line))
                except ValueError:
                    torn += 1
    except OSError:
        pass
    return records, torn


def step_dirs(checkpoints):
    """({step: path} of committed step-N folders, [temporary folder names])."""
    steps, temps = {}, []
    try:
        names = os.listdir(checkpoints)
    except OSError:
        return steps, temps
    for n in names:
        m = re.fullmatch(r"step-(\d+)", n)
        if m:
            steps[int(m.group(1))] = os.path.join(checkpoints, n)
        elif re.fullmatch(r"step-\d+\.tmp-.*", n):
            temps.append(n)
    return steps, sorted(temps)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def names_rank(lines, dead, survivor):
    """Whether the lines name rank `dead` ("rank 1", "ranks 0, 1", "rank(s) 1"), not counting the
    survivor's own "(rank S of N)"."""
    text = " ".join(lines)
    text = re.sub(r"\(rank %d of \d+\)" % survivor, "", text)
    return re.search(r"\branks?(?:\(s\))?\s*[:#]?\s*(?:\d+\s*(?:,|and|&)\s*)*%d\b" % dead, text) is not None


def keep_folder_if_failed(rec, folder, keep_work):
    """A trial's folder: removed when the trial passed (unless --keep-work), else kept and
    named in its record (`logs`)."""
    if rec["ok"] and not keep_work:
        shutil.rmtree(folder, ignore_errors=True)
    else:
        rec["logs"] = folder


def tail(lines, n=300):
    return lines[-1][:n] if lines else None


# ----------------------------------------------------------------------------- rank death


class RankDeath:
    def __init__(self, c):
        self.c = c
        self.a = c.args
        self.durations = {}

    def config(self, world, ckpt_freq, async_save, deterministic):
        extra = ["--timeout-s", str(self.a.timeout_s)]
        if ckpt_freq:
            extra += ["--ckpt-freq", str(ckpt_freq)]
        if async_save:
            extra.append("--async-checkpoint")
        if deterministic:
            extra.append("--deterministic")
        return extra

    def calibrate(self):
        """An uninterrupted run per world size: the setup works, and how long a run lasts."""
        for world in (2, 3, 4):
            folder = os.path.join(self.c.work, "rank-death", "calibrate-%d" % world)
            argv = self.c.train_argv(folder, "run", self.a.rd_steps, self.config(world, 2, False, False))
            t0 = time.monotonic()
            ranks = self.c.launch(folder, argv, world, "env")
            left = wait_all(ranks, t0 + 300)
            for r in left:
                r.kill_group()
            bad = [r.name for r in ranks if r.proc.returncode != 0]
            if bad:
                raise SetupError(
                    "rank death: the uninterrupted %d-rank run failed (%s; logs in %s)"
                    % (world, ", ".join(bad), folder)
                )
            self.durations[world] = time.monotonic() - t0
            shutil.rmtree(folder, ignore_errors=True)
        log(
            "rank death: uninterrupted run of %d steps takes %s s"
            % (self.a.rd_steps, {w: round(d, 2) for w, d in self.durations.items()})
        )

    def draw(self, i):
        rng = self.c.rng
        mode = rng.choices(["env", "slurm", "nproc"], [0.7, 0.15, 0.15])[0]
        ckpt_freq = rng.choice([0, 2, 5])
        return {
            "world_size": rng.choice([2, 3, 4]),
            "launch_mode": mode,
            "ckpt_freq": ckpt_freq,
            "async_checkpoint": bool(ckpt_freq) and rng.random() < 0.5,
            "deterministic": rng.random() < 0.5,
            "trigger": rng.choices(["time", "step", "save", "connect"], [0.45, 0.25, 0.2 if ckpt_freq else 0, 0.1])[0],
        }

    def trial(self, i):
        for attempt in range(5):
            p = self.draw(i)
            rec = self.run(i, p, attempt)
            if rec is not None:
                return rec
        raise SetupError("rank death trial %d: the victim had exited before every kill drawn" % i)

    def run(self, i, p, attempt):
        rng, a = self.c.rng, self.a
        world = p["world_size"]
        folder = os.path.join(self.c.work, "rank-death", "%03d" % i)
        shutil.rmtree(folder, ignore_errors=True)
        argv = self.c.train_argv(
            folder, "run", a.rd_steps, self.config(world, p["ckpt_freq"], p["async_checkpoint"], p["deterministic"])
        )
        victim_rank = rng.randrange(world)
        step_target = rng.randint(1, a.rd_steps - 1)
        jitter = rng.uniform(0, 0.03)
        delay_target = rng.uniform(0.0, 0.95 * self.durations[world])
        connect_delay = rng.uniform(0.0, 0.25)  # after the victim's "world:" line: joining the group
        t0 = time.monotonic()
        procs = self.c.launch(folder, argv, world, p["launch_mode"])
        lead = procs[0]  # rank 0, or the launcher (its stdout carries "[rank 0] ...")
        checkpoints = os.path.join(folder, "run", "checkpoints")
        # Wait for the trigger.
        deadline = t0 + 3 * self.durations[world] + 30
        fired = False
        while time.monotonic() < deadline and all(r.alive() for r in procs):
            now = time.monotonic()
            if p["trigger"] == "time" and now - t0 >= delay_target:
                fired = True
            elif p["trigger"] == "step" and re.search(r"step %d/" % step_target, lead.stdout()):
                time.sleep(jitter)
                fired = True
            elif p["trigger"] == "save" and step_dirs(checkpoints)[1]:
                time.sleep(jitter / 1.5)
                fired = True
            elif p["trigger"] == "connect" and re.search(
                r"^(\[rank %d\] )?world: rank=%d " % (victim_rank, victim_rank),
                (lead if p["launch_mode"] == "nproc" else procs[victim_rank]).stdout(),
                re.M,
            ):
                time.sleep(connect_delay)
                fired = True
            if fired:
                break
            time.sleep(0.002 if p["trigger"] == "save" else 0.005)
        # The victim's pid.
        victim_pid = None
        if p["launch_mode"] == "nproc":
            for child in children_of(lead.pid):
                if env_of(child).get("RANK") == str(victim_rank):
                    victim_pid = child
        else:
            victim_pid = procs[victim_rank].pid if procs[victim_rank].alive() else None
        if not fired or victim_pid is None or not pid_alive(victim_pid):
            for r in procs:
                r.kill_group()
            shutil.rmtree(folder, ignore_errors=True)
            return None  # the run ended (or the rank did) before the moment: draw again
        # Stop, look, kill.
        os.kill(victim_pid, signal.SIGSTOP)
        kill_at_s = time.monotonic() - t0
        lead_out = lead.stdout()
        progress = re.findall(r"step (\d+)/", lead_out)
        finished = "summary: " in lead_out  # rank 0 was done with every collective but the teardown
        save_in_flight = bool(step_dirs(checkpoints)[1])
        stack = sample_stack(victim_pid)
        phase, top, background_save = classify_stack(stack, victim_pid)
        if p["launch_mode"] == "nproc":
            survivors = [lead]  # the launcher; its other children must be gone too (below)
            others = [c for c in children_of(lead.pid) if c != victim_pid]
        else:
            survivors = [r for k, r in enumerate(procs) if k != victim_rank and r.alive()]
            others = []
        os.kill(victim_pid, signal.SIGKILL)
        t_kill = time.monotonic()
        limit = a.timeout_s + a.margin_s
        hung = wait_all(survivors, t_kill + limit)
        # nproc: the launcher's other children must be gone too.
        while others and any(pid_alive(c) for c in others) and time.monotonic() < t_kill + limit:
            time.sleep(0.02)
        hung_children = [c for c in others if pid_alive(c)]
        for r in hung:
            r.kill_group()
        for c in hung_children:
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for r in procs:  # the victim (env/slurm) and anything left
            if r.alive():
                r.kill_group()
        rec = dict(p)
        rec.update(
            {
                "trial": i,
                "redraws": attempt,
                "killed_rank": victim_rank,
                "kill_at_s": round(kill_at_s, 3),
                "target": {
                    "time": round(delay_target, 3),
                    "step": step_target,
                    "save": "first .tmp- folder",
                    "connect": round(connect_delay, 3),
                }[p["trigger"]],
                "rank0_last_step_logged": int(progress[-1]) if progress else 0,
                "save_in_flight": save_in_flight,
                "phase": phase,
                "victim_frames": top,
                "victim_background_save": background_save,
                "run_finished_before_kill": finished,
            }
        )
        out = []
        for s in survivors:
            lines = s.stderr_lines()
            surv_rank = -1 if s.name == "launcher" else int(s.name[4:])
            e = exit_fields(s)
            out.append(
                {
                    "rank": "launcher" if s.name == "launcher" else surv_rank,
                    **e,
                    "exit_after_kill_s": round(s.end - t_kill, 3) if s.end and s not in hung else None,
                    "hung": s in hung,
                    "names_dead_rank": names_rank(lines, victim_rank, surv_rank),
                    "stderr_lines": len(lines),
                    "last_stderr_line": tail(lines),
                    "stderr_tail": [line[:300] for line in lines[-3:]],
                }
            )
        rec["survivors"] = out
        # Rank 0 prints its summary only after the run's last collective (the export's
        # barrier), which needs every rank: if it printed one after the kill, the victim had
        # passed that barrier when it was stopped, and died in its teardown. This catches
        # what the snapshot above misses when rank 0 had not yet printed its summary and the
        # victim's stack could not be read.
        rec["last_collective_passed"] = finished or "summary: " in lead.stdout()
        rec["launcher_children_hung"] = len(hung_children)
        rec["hang"] = bool(hung) or bool(hung_children)
        rec["survivor_exit_zero"] = sum(1 for s in out if s["exit_code"] == 0)
        rec["survivor_crashed"] = sum(1 for s in out if s["signal"] is not None and not s["hung"])
        rec["all_survivors_named_dead_rank"] = all(s["names_dead_rank"] for s in out) if out else None
        # A rank killed in its teardown, after the last collective of a finished run, leaves
        # nothing for the others to fail on: their exit 0 is right then.
        rec["exit_zero_accepted"] = rec["phase"] == "shutdown" or rec["last_collective_passed"]
        # Every survivor that failed must say which rank died: on one machine the failure
        # board always can (a post, or the dead rank's pid gone).
        rec["survivors_not_naming_dead_rank"] = sum(
            1 for s in out if s["exit_code"] not in (0, None) and not s["names_dead_rank"]
        )
        rec["ok"] = (
            not rec["hang"]
            and rec["survivor_crashed"] == 0
            and (rec["survivor_exit_zero"] == 0 or rec["exit_zero_accepted"])
            and rec["survivors_not_naming_dead_rank"] == 0
        )
        keep_folder_if_failed(rec, folder, a.keep_work)
        return rec

    def campaign(self, trials):
        self.calibrate()
        recs = []
        for i in range(trials):
            rec = self.trial(i)
            recs.append(rec)
            log(
                "rank death %d/%d: world %d %s, rank %d killed at %.2fs (%s, %s): %s%s"
                % (
                    i + 1,
                    trials,
                    rec["world_size"],
                    rec["launch_mode"],
                    rec["killed_rank"],
                    rec["kill_at_s"],
                    rec["trigger"],
                    rec["phase"],
                    "ok" if rec["ok"] else "FAILED",
                    " HANG" if rec["hang"] else "",
                )
            )
        exits = [s["exit_after_kill_s"] for r in recs for s in r["survivors"] if s["exit_after_kill_s"] is not None]
        phases = {}
        for r in recs:
            phases[r["phase"]] = phases.get(r["phase"], 0) + 1
        survivors = [s for r in recs for s in r["survivors"]]
        return {
            "trials": len(recs),
            "hangs": sum(1 for r in recs if r["hang"]),
            "survivors": len(survivors),
            "survivors_exit_zero": sum(r["survivor_exit_zero"] for r in recs),
            "survivors_exit_zero_after_a_finished_run": sum(
                r["survivor_exit_zero"] for r in recs if r["exit_zero_accepted"]
            ),
            "survivors_crashed": sum(r["survivor_crashed"] for r in recs),
            "survivors_naming_dead_rank": sum(1 for s in survivors if s["names_dead_rank"]),
            "trials_all_survivors_named_dead_rank": sum(1 for r in recs if r["all_survivors_named_dead_rank"]),
            "failed_survivors_not_naming_dead_rank": sum(r["survivors_not_naming_dead_rank"] for r in recs),
            "max_exit_after_kill_s": max(exits) if exits else None,
            "median_exit_after_kill_s": sorted(exits)[len(exits) // 2] if exits else None,
            "by_phase": phases,
            "by_world_size": {str(w): sum(1 for r in recs if r["world_size"] == w) for w in (2, 3, 4)},
            "by_launch_mode": {m: sum(1 for r in recs if r["launch_mode"] == m) for m in ("env", "slurm", "nproc")},
            "uninterrupted_run_s": {str(w): round(d, 2) for w, d in self.durations.items()},
            "passed": all(r["ok"] for r in recs),
        }, recs


# ----------------------------------------------------------------------------- crash during save


class CrashDuringSave:
    def __init__(self, c):
        self.c = c
        self.a = c.args
        self.refs = {}

    def argv(self, folder, world, async_save, ckpt_freq, keep_last):
        extra = [
            "--deterministic",
            "--ckpt-freq",
            str(ckpt_freq),
            "--keep-last",
            str(keep_last),
            "--timeout-s",
            str(self.a.timeout_s),
        ]
        if async_save:
            extra.append("--async-checkpoint")
        return self.c.train_argv(folder, "run", self.a.cs_steps, extra)

    def mode(self, world):
        return "single" if world == 1 else "env"

    def outcome(self, run_dir):
        """What a finished run left: per-step losses and gradient norms, the exported model's
        sha256 and the final checkpoint's rank files' sha256."""
        records, torn = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        steps = {}
        for r in records:
            if r.get("kind") == "train":
                steps.setdefault(r["step"], []).append((r["loss"], r["grad_norm"]))
        final = os.path.join(run_dir, "checkpoints", "step-%06d" % self.a.cs_steps)
        files = {}
        try:
            with open(os.path.join(final, "index.json")) as f:
                files = {n: v["sha256"] for n, v in json.load(f)["files"].items()}
        except (OSError, ValueError, KeyError):
            pass
        hf = os.path.join(run_dir, "hf", "model.safetensors")
        return {
            "steps": steps,
            "hf_sha256": sha256_file(hf) if os.path.exists(hf) else None,
            "final_files": files,
            "torn_metrics_lines": torn,
        }

    def references(self):
        """The uninterrupted runs: 1 and 2 ranks, synchronous and asynchronous saves; all four
        must have the same losses and exported bits (--deterministic: independent of the world
        size), and each world size one set of checkpoint bytes."""
        for world in (1, 2):
            for async_save in (False, True):
                folder = os.path.join(
                    self.c.work, "crash-save", "ref-%d-%s" % (world, "async" if async_save else "sync")
                )
                shutil.rmtree(folder, ignore_errors=True)
                ranks = self.c.launch(folder, self.argv(folder, world, async_save, 1, 0), world, self.mode(world))
                left = wait_all(ranks, time.monotonic() + 300)
                for r in left:
                    r.kill_group()
                if any(r.proc.returncode != 0 for r in ranks):
                    raise SetupError(
                        "crash during save: the uninterrupted run (%d ranks, %s) failed; logs in %s"
                        % (world, "async" if async_save else "sync", folder)
                    )
                self.refs[(world, async_save)] = self.outcome(os.path.join(folder, "run"))
        mismatches = []
        for (world, _async_save), ref in self.refs.items():
            base = self.refs[(world, False)]  # --batch-size is per rank: 1 and 2 ranks train other batches
            if {s: v[-1] for s, v in ref["steps"].items()} != {s: v[-1] for s, v in base["steps"].items()}:
                mismatches.append("%d rank(s): asynchronous saves changed the losses" % world)
            if ref["hf_sha256"] != base["hf_sha256"]:
                mismatches.append("%d rank(s): asynchronous saves changed the exported model" % world)
            if ref["final_files"] != base["final_files"]:
                mismatches.append("%d rank(s): asynchronous saves changed the final checkpoint's bytes" % world)
        base = self.refs[(1, False)]
        if len(base["steps"]) != self.a.cs_steps or base["hf_sha256"] is None:
            raise SetupError(
                "crash during save: the reference run logged %d of %d steps" % (len(base["steps"]), self.a.cs_steps)
            )
        log(
            "crash during save: uninterrupted runs, synchronous and asynchronous saves per world size: %s"
            % ("identical" if not mismatches else mismatches)
        )
        return mismatches

    def state_after_kill(self, run_dir, keep_last):
        checkpoints = os.path.join(run_dir, "checkpoints")
        steps, temps = step_dirs(checkpoints)
        complete, incomplete = [], {}
        for s, path in sorted(steps.items()):
            ok, reason = self.c.inspect(path)
            if ok:
                complete.append(s)
            else:
                incomplete[s] = reason
        records, torn = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        committed = sorted({r["step"] for r in records if r.get("kind") == "checkpoint" and "error" not in r})
        lost = []
        for s in committed:
            if s in complete:
                continue
            newer = [x for x in complete if x > s]
            if keep_last > 0 and len(newer) >= keep_last:
                continue  # pruned as --keep-last says
            lost.append(s)
        return {
            "committed_logged": committed,
            "complete": complete,
            "incomplete": incomplete,
            "temporary": temps,
            "lost": lost,
            "metrics_exists": os.path.exists(os.path.join(run_dir, "metrics.jsonl")),
            "torn_metrics_lines": torn,
        }

    # One crash-during-save trial, read top to bottom: draw, kill, inspect, resume, compare.
    # Past ruff.toml's limits (branching 25, 115 statements): still to be split into those phases.
    def trial(self, i):  # noqa: C901, PLR0915
        rng, a = self.c.rng, self.a
        world = 1 if i % 4 in (0, 3) else 2
        async_save = i % 2 == 1  # synchronous and asynchronous alternately
        ckpt_freq = rng.choice([1, 2])
        keep_last = rng.choice([0, 1, 2, 2])
        kill_mode = "all" if world == 1 or rng.random() < 0.5 else "one"
        trigger = rng.choices(["time", "step", "save"], [0.2, 0.3, 0.5])[0]
        ref = self.refs[(world, async_save)]
        folder = os.path.join(self.c.work, "crash-save", "%03d" % i)
        shutil.rmtree(folder, ignore_errors=True)
        argv = self.argv(folder, world, async_save, ckpt_freq, keep_last)
        run_dir = os.path.join(folder, "run")
        checkpoints = os.path.join(run_dir, "checkpoints")
        step_target = rng.randint(1, a.cs_steps)
        save_target = rng.randint(1, a.cs_steps // ckpt_freq) * ckpt_freq  # the save to kill in
        jitter = rng.uniform(0, 0.03)
        rec = {
            "trial": i,
            "world_size": world,
            "async_checkpoint": async_save,
            "ckpt_freq": ckpt_freq,
            "keep_last": keep_last,
            "kill_mode": kill_mode,
            "trigger": trigger,
        }
        for _attempt in range(5):
            t0 = time.monotonic()
            delay_target = rng.uniform(0.0, self.duration)
            ranks = self.c.launch(os.path.join(folder, "killed"), argv, world, self.mode(world))
            lead = ranks[0]
            fired = False
            deadline = t0 + 3 * self.duration + 30
            while time.monotonic() < deadline and all(r.alive() for r in ranks):
                if trigger == "time" and time.monotonic() - t0 >= delay_target:
                    fired = True
                elif trigger == "step" and re.search(r"step %d/" % step_target, lead.stdout()):
                    time.sleep(jitter)
                    fired = True
                elif trigger == "save" and any(
                    t.startswith("step-%06d.tmp-" % save_target) for t in step_dirs(checkpoints)[1]
                ):
                    time.sleep(jitter / 3)
                    fired = True
                if fired:
                    break
                time.sleep(0.002 if trigger == "save" else 0.005)
            victim = 0 if kill_mode == "all" else rng.randrange(world)
            if fired and ranks[victim].alive():
                break
            for r in ranks:
                r.kill_group()
            shutil.rmtree(folder, ignore_errors=True)
            trigger, rec["trigger"] = "time", "time"  # the run ended first: a moment in time instead
        else:
            raise SetupError("crash during save trial %d: the run ended before every moment drawn" % i)
        targets = [r for r in ranks if r.alive()] if kill_mode == "all" else [ranks[victim]]
        for r in targets:
            os.kill(r.pid, signal.SIGSTOP)
        rec["kill_at_s"] = round(time.monotonic() - t0, 3)
        rec["target"] = {"time": round(delay_target, 3), "step": step_target, "save": save_target}[trigger]
        rec["killed_rank"] = "all" if kill_mode == "all" else victim
        progress = re.findall(r"step (\d+)/", lead.stdout())
        rec["rank0_last_step_logged"] = int(progress[-1]) if progress else 0
        rec["save_in_flight"] = bool(step_dirs(checkpoints)[1])
        stack = sample_stack(targets[0].pid)
        rec["phase"], rec["victim_frames"], rec["victim_background_save"] = classify_stack(stack, targets[0].pid)
        for r in targets:
            os.kill(r.pid, signal.SIGKILL)
        t_kill = time.monotonic()
        hung = wait_all(ranks, t_kill + a.timeout_s + a.margin_s)
        for r in hung:
            r.kill_group()
        rec["hang"] = bool(hung)
        rec["survivors"] = [
            {
                "rank": int(r.name[4:]),
                **exit_fields(r),
                "exit_after_kill_s": round(r.end - t_kill, 3) if r.end and r not in hung else None,
                "last_stderr_line": tail(r.stderr_lines()),
            }
            for r in ranks
            if r not in targets
        ]
        after = self.state_after_kill(run_dir, keep_last)
        rec["after_kill"] = after
        expected = max(after["complete"]) if after["complete"] else None
        rec["expected_resume_step"] = expected
        # The same command again.
        ranks = self.c.launch(os.path.join(folder, "resumed"), argv, world, self.mode(world))
        left = wait_all(ranks, time.monotonic() + a.resume_limit_s)
        for r in left:
            r.kill_group()
        rec["resume_hang"] = bool(left)
        rec["resume_exit_codes"] = [r.proc.returncode for r in ranks]
        out = ranks[0].stdout()
        m = re.search(r"resuming from (\S+): (\d+) optimizer steps done", out)
        rec["resumed_from_step"] = int(m.group(2)) if m else None
        rec["resume_skipped_lines"] = re.findall(r"^skipping .*$", out, re.M)
        rec["resume_stderr"] = tail(ranks[0].stderr_lines())
        problems = []
        if rec["hang"]:
            problems.append("a rank left alive after the kill did not exit")
        if rec["resume_hang"]:
            problems.append("the rerun hung")
        if after["lost"]:
            problems.append("committed checkpoint(s) %s lost" % after["lost"])
        if after["incomplete"]:
            problems.append("step folder(s) %s incomplete after the kill" % sorted(after["incomplete"]))
        refused = (
            expected is None
            and after["metrics_exists"]
            and rec["resume_exit_codes"][0] == 1
            and "no complete checkpoint to resume from" in (rec["resume_stderr"] or "")
        )
        rec["refused_without_checkpoint"] = refused
        rec["bitwise"] = None
        if refused:
            pass  # README: a run directory with metrics but no checkpoint is never overwritten
        elif any(c != 0 for c in rec["resume_exit_codes"]):
            problems.append("the rerun failed: %s" % rec["resume_stderr"])
        else:
            if rec["resumed_from_step"] != expected:
                problems.append(
                    "resumed from step %s, the newest complete checkpoint is %s" % (rec["resumed_from_step"], expected)
                )
            got = self.outcome(run_dir)
            ref_steps = {s: v[-1] for s, v in ref["steps"].items()}
            bad_steps = sorted(s for s in ref_steps if any(v != ref_steps[s] for v in got["steps"].get(s, [None])))
            extra_steps = sorted(set(got["steps"]) - set(ref_steps))
            rec["bitwise_losses"] = not bad_steps and not extra_steps
            rec["bitwise_model"] = got["hf_sha256"] == ref["hf_sha256"]
            rec["bitwise_final_checkpoint"] = got["final_files"] == ref["final_files"]
            rec["bitwise"] = rec["bitwise_losses"] and rec["bitwise_model"] and rec["bitwise_final_checkpoint"]
            if bad_steps:
                rec["steps_differing"] = bad_steps
            if not rec["bitwise"]:
                problems.append(
                    "not bitwise the uninterrupted run (losses %s, model %s, final checkpoint %s)"
                    % (rec["bitwise_losses"], rec["bitwise_model"], rec["bitwise_final_checkpoint"])
                )
            steps, temps = step_dirs(checkpoints)
            end_incomplete = {}
            for s, path in sorted(steps.items()):
                ok, reason = self.c.inspect(path)
                if not ok:
                    end_incomplete[s] = reason
            rec["at_end"] = {
                "complete": sorted(set(steps) - set(end_incomplete)),
                "incomplete": end_incomplete,
                "temporary": temps,
            }
            if end_incomplete:
                problems.append("step folder(s) %s incomplete at the end" % sorted(end_incomplete))
        rec["problems"] = problems
        rec["lost_or_half_read"] = bool(
            after["lost"] or after["incomplete"] or (rec.get("at_end") or {}).get("incomplete")
        )
        rec["ok"] = not problems
        keep_folder_if_failed(rec, folder, a.keep_work)
        return rec

    def campaign(self, trials):
        t0 = time.monotonic()
        mismatches = self.references()
        self.duration = (time.monotonic() - t0) / 4
        recs = []
        for i in range(trials):
            rec = self.trial(i)
            recs.append(rec)
            log(
                "crash during save %d/%d: %d rank(s) %s, killed %s at %.2fs (%s, %s, tmp %s): "
                "committed %s, complete %s, resumed from %s: %s"
                % (
                    i + 1,
                    trials,
                    rec["world_size"],
                    "async" if rec["async_checkpoint"] else "sync",
                    rec["killed_rank"],
                    rec["kill_at_s"],
                    rec["trigger"],
                    rec["phase"],
                    rec["save_in_flight"],
                    rec["after_kill"]["committed_logged"],
                    rec["after_kill"]["complete"],
                    rec["resumed_from_step"],
                    "ok" if rec["ok"] else "FAILED " + "; ".join(rec["problems"]),
                )
            )
        resumed = [r for r in recs if r["bitwise"] is not None]
        phases = {}
        for r in recs:
            phases[r["phase"]] = phases.get(r["phase"], 0) + 1
        return {
            "trials": len(recs),
            "synchronous": sum(1 for r in recs if not r["async_checkpoint"]),
            "asynchronous": sum(1 for r in recs if r["async_checkpoint"]),
            "hangs": sum(1 for r in recs if r["hang"] or r["resume_hang"]),
            "lost_or_half_read": sum(1 for r in recs if r["lost_or_half_read"]),
            "resumed_compared": len(resumed),
            "not_bitwise": sum(1 for r in resumed if not r["bitwise"]),
            "resumed_from_wrong_checkpoint": sum(
                1 for r in resumed if r["resumed_from_step"] != r["expected_resume_step"]
            ),
            "refused_without_checkpoint": sum(1 for r in recs if r["refused_without_checkpoint"]),
            "killed_with_save_in_flight": sum(1 for r in recs if r["save_in_flight"]),
            "by_phase": phases,
            "reference_mismatches": mismatches,
            "passed": all(r["ok"] for r in recs) and not mismatches,
        }, recs


# ----------------------------------------------------------------------------- disk full


class DiskFull:
    def __init__(self, c):
        self.c = c
        self.a = c.args

    def argv(self, save_dir, async_save, steps=6):
        extra = ["--deterministic", "--ckpt-freq", "1", "--keep-last", "2", "--timeout-s", str(self.a.timeout_s)]
        if async_save:
            extra.append("--async-checkpoint")
        return self.c.train_argv(save_dir, "run", steps, extra)

    def checkpoint_bytes(self, world):
        folder = os.path.join(self.c.work, "disk-full", "size-%d" % world)
        ranks = self.c.launch(folder, self.argv(folder, False, 1), world, "single" if world == 1 else "env")
        wait_all(ranks, time.monotonic() + 300)
        step = os.path.join(folder, "run", "checkpoints", "step-000001")
        if any(r.proc.returncode != 0 for r in ranks) or not os.path.isdir(step):
            raise SetupError("disk full: the sizing run failed; logs in %s" % folder)
        total = sum(os.path.getsize(os.path.join(step, n)) for n in os.listdir(step))
        shutil.rmtree(folder, ignore_errors=True)
        return total

    def mount(self, path, size_bytes):
        os.makedirs(path, exist_ok=True)
        r = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=%dk" % (size_bytes // 1024), "tmpfs", path],
            capture_output=True,
            text=True,
        )
        return r.returncode == 0, r.stderr.strip()

    def umount(self, path):
        subprocess.run(["umount", path], capture_output=True)

    def check(self, rec, ranks, run_dir, async_save, cause, expect_earlier):
        """The save after the last committed one failed: the run stopped, said so in one line,
        and left the earlier checkpoint complete."""
        problems = []
        codes = [r.proc.returncode for r in ranks]
        rec["exit_codes"] = codes
        rec["stderr"] = [r.stderr_lines() for r in ranks]
        if any(c == 0 for c in codes):
            problems.append("a rank exited 0")
        if any(c is None or c < 0 for c in codes):
            problems.append("a rank crashed or hung")
        for k, lines in enumerate(rec["stderr"]):
            if len(lines) != 1:
                problems.append("rank %d printed %d stderr lines" % (k, len(lines)))
            elif cause not in lines[0] or run_dir not in lines[0]:
                problems.append("rank %d's line does not name the path under %s and '%s'" % (k, run_dir, cause))
        records, _ = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
        saved = sorted(r["step"] for r in records if r.get("kind") == "checkpoint" and "error" not in r)
        trained = [r["step"] for r in records if r.get("kind") == "train"]
        rec["checkpoints_logged"] = saved
        earlier_step = max(saved) if saved else None
        failed_step = (earlier_step or 0) + 1  # --ckpt-freq 1
        rec["failed_save_step"] = failed_step
        if expect_earlier and earlier_step is None:
            problems.append("no checkpoint was committed before the disk filled (the tmpfs was meant to hold one)")
        rec["last_step_logged"] = max(trained) if trained else 0
        rec["save_failure_logged"] = [r["step"] for r in records if r.get("kind") == "checkpoint" and "error" in r]
        # Synchronous: the save of step k fails before step k+1; asynchronous: it is raised by
        # the next save (the next step with --ckpt-freq 1) or at the end.
        allowed = failed_step + (1 if async_save else 0)
        if rec["last_step_logged"] > allowed:
            problems.append(
                "training went on to step %d after the save of step %d failed" % (rec["last_step_logged"], failed_step)
            )
        steps, temps = step_dirs(os.path.join(run_dir, "checkpoints"))
        rec["step_folders"], rec["temporary_folders"] = sorted(steps), temps
        if earlier_step is not None:
            ok, reason = self.c.inspect(steps.get(earlier_step, os.path.join(run_dir, "checkpoints", "missing")))
            rec["earlier_checkpoint_complete"] = ok
            if not ok:
                problems.append("the earlier checkpoint step %d is not complete: %s" % (earlier_step, reason))
        if any(s >= failed_step for s in steps):
            problems.append("a step folder at or after the failed save exists")
        rec["problems"] = problems
        rec["ok"] = not problems
        return rec

    def campaign(self, quick):
        recs, notes = [], []
        sizes = {w: self.checkpoint_bytes(w) for w in (1, 2)}
        fractions = [0.1, 0.5, 0.9, 0.97, 0.985] if not quick else [0.5]
        mount_ok = True
        for world in (1, 2):
            for async_save in (False, True):
                for f in fractions:
                    folder = os.path.join(
                        self.c.work, "disk-full", "w%d-%s-%02d" % (world, "a" if async_save else "s", int(f * 100))
                    )
                    mnt = os.path.join(folder, "mnt")
                    size = int(sizes[world] * (1 + f)) + 16 * 1024  # one checkpoint, f of the next, metrics
                    size = (size + 4095) // 4096 * 4096
                    ok, err = self.mount(mnt, size)
                    if not ok:
                        mount_ok = False
                        notes.append("mount -t tmpfs refused (%s): RLIMIT_FSIZE cases only" % err)
                        break
                    try:
                        ranks = self.c.launch(
                            os.path.join(folder, "logs"),
                            self.argv(mnt, async_save),
                            world,
                            "single" if world == 1 else "env",
                        )
                        left = wait_all(ranks, time.monotonic() + self.a.resume_limit_s)
                        for r in left:
                            r.kill_group()
                        rec = {
                            "case": "tmpfs",
                            "world_size": world,
                            "async_checkpoint": async_save,
                            "tmpfs_bytes": size,
                            "checkpoint_bytes": sizes[world],
                            "fraction_of_next": f,
                        }
                        self.check(rec, ranks, os.path.join(mnt, "run"), async_save, "No space left on device", True)
                    finally:
                        self.umount(mnt)
                    recs.append(rec)
                    log(
                        "disk full: %d rank(s) %s, tmpfs %d bytes: %s"
                        % (
                            world,
                            "async" if async_save else "sync",
                            size,
                            "ok" if rec["ok"] else "FAILED " + "; ".join(rec["problems"]),
                        )
                    )
                    keep_folder_if_failed(rec, folder, self.a.keep_work)
                if not mount_ok:
                    break
            if not mount_ok:
                break

        # RLIMIT_FSIZE (SIGXFSZ ignored): every rank file is past the limit, so the first save
        # fails with EFBIG; there is no earlier checkpoint.
        def limit_fsize():
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

        for world in (1, 2):
            for async_save in (False, True) if not quick else (False,):
                folder = os.path.join(self.c.work, "disk-full", "rlimit-w%d-%s" % (world, "a" if async_save else "s"))
                ranks = self.c.launch(
                    os.path.join(folder, "logs"),
                    self.argv(folder, async_save),
                    world,
                    "single" if world == 1 else "env",
                    preexec=limit_fsize,
                )
                left = wait_all(ranks, time.monotonic() + self.a.resume_limit_s)
                for r in left:
                    r.kill_group()
                rec = {
                    "case": "rlimit_fsize",
                    "world_size": world,
                    "async_checkpoint": async_save,
                    "rlimit_fsize_bytes": 256 * 1024,
                }
                self.check(rec, ranks, os.path.join(folder, "run"), async_save, "File too large", False)
                recs.append(rec)
                log(
                    "disk full: RLIMIT_FSIZE, %d rank(s) %s: %s"
                    % (
                        world,
                        "async" if async_save else "sync",
                        "ok" if rec["ok"] else "FAILED " + "; ".join(rec["problems"]),
                    )
                )
                keep_folder_if_failed(rec, folder, self.a.keep_work)
        return {
            "trials": len(recs),
            "tmpfs_trials": sum(1 for r in recs if r["case"] == "tmpfs"),
            "rlimit_trials": sum(1 for r in recs if r["case"] == "rlimit_fsize"),
            "failed_checks": sum(1 for r in recs if not r["ok"]),
            "mount_permitted": mount_ok,
            "notes": notes,
            "passed": all(r["ok"] for r in recs),
        }, recs


# ----------------------------------------------------------------------------- corruption


def json_valid_flips(text):
    """(label, offset, new byte) edits of index.json that keep it valid JSON."""
    out = []

    def digit_at(label, pattern, group=1):
        m = re.search(pattern, text)
        if m:
            pos = m.end(group) - 1
            out.append((label, pos, ord(text[pos]) ^ 0x01))

    digit_at("train_state.step digit", r'"step": (\d+)')
    digit_at("train_state.data_position digit", r'"data_position": (\d+)')
    digit_at("optimizer step count digit", r'"optimizer": \{[^}]*?"step": \{\s*"[^"]+": (\d+)')
    digit_at("file size digit", r'"bytes": (\d+)')
    digit_at("tensor shape digit", r'"shape": \[\s*(\d+)')
    digit_at("piece row digit", r'"rows": \[\s*\d+,\s*(\d+)')
    digit_at("world_size digit", r'"world_size": (\d+)')
    digit_at("config lr digit", r'"lr": ([0-9.e-]+\d)')
    m = re.search(r'"sha256": "([0-9a-f])', text)
    if m:
        pos = m.start(1)
        out.append(("sha256 hex digit", pos, ord("1" if text[pos] == "0" else "0")))
    m = re.search(r'"model/transformer\.(h)\.', text)
    if m:
        out.append(("tensor name letter", m.start(1), ord("i")))
    m = re.search(r'"strategy": "(f)ull_shard"', text)
    if m:
        out.append(("mesh strategy letter", m.start(1), ord("g")))
    return out


class Corruption:
    def __init__(self, c):
        self.c = c
        self.a = c.args

    def make_base(self):
        folder = os.path.join(self.c.work, "corruption", "base")
        shutil.rmtree(folder, ignore_errors=True)
        self.argv_extra = ["--deterministic", "--ckpt-freq", "2", "--keep-last", "0"]
        ranks = self.c.launch(folder, self.c.train_argv(folder, "run", 4, self.argv_extra), 2, "env")
        wait_all(ranks, time.monotonic() + 300)
        if any(r.proc.returncode != 0 for r in ranks):
            raise SetupError("corruption: the 2-rank run that makes the checkpoint failed; logs in %s" % folder)
        return os.path.join(folder, "run")

    def cases(self, step_dir):
        out = []
        for name in sorted(os.listdir(step_dir)):
            path = os.path.join(step_dir, name)
            data = open(path, "rb").read()
            out.append((name, "flip middle byte", ("flip", len(data) // 2, data[len(data) // 2] ^ 0x01)))
            if name.endswith(".safetensors"):
                out.append((name, "flip safetensors header byte", ("flip", 40, data[40] ^ 0x01)))
                out.append((name, "flip last byte", ("flip", len(data) - 1, data[-1] ^ 0x01)))
            if name == "index.json":
                for label, pos, byte in json_valid_flips(data.decode()):
                    out.append((name, "flip keeping JSON valid: " + label, ("flip", pos, byte)))
            out.append((name, "truncate to half", ("truncate", len(data) // 2)))
            # index.json ends in "}\n": cutting the newline alone changes no content.
            cut = 2 if name == "index.json" else 1
            out.append((name, "truncate last %d byte(s)" % cut, ("truncate", len(data) - cut)))
            out.append((name, "delete", ("delete",)))
        return out

    @staticmethod
    def apply(path, edit):
        if edit[0] == "flip":
            with open(path, "r+b") as f:
                f.seek(edit[1])
                f.write(bytes([edit[2]]))
        elif edit[0] == "truncate":
            os.truncate(path, edit[1])
        else:
            os.remove(path)

    def judge(self, r, name):
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        # inspect prints its table on stdout and a failed verification as "checksums: <error>"
        lines += [
            line.strip()
            for line in r.stdout.splitlines()
            if "checksums: " in line and not line.strip().endswith("checksums: ok")
        ]
        rc = r.returncode
        return {
            "exit_code": rc if rc >= 0 else None,
            "signal": signal.Signals(-rc).name if rc < 0 else None,
            "stderr_lines": len(lines),
            "line": tail(lines, 400),
            "names_file": any(name in line for line in lines),
            "silent": rc == 0,
            "crashed": rc < 0 or rc >= 128,
        }

    def campaign(self):
        base_run = self.make_base()
        target = "step-000004"
        recs = []
        for name, label, edit in self.cases(os.path.join(base_run, "checkpoints", target)):
            k = len(recs)
            folder = os.path.join(self.c.work, "corruption", "%03d" % k)
            shutil.rmtree(folder, ignore_errors=True)
            run = os.path.join(folder, "run")
            shutil.copytree(base_run, run)
            step_dir = os.path.join(run, "checkpoints", target)
            self.apply(os.path.join(step_dir, name), edit)
            rec = {"case": k, "file": name, "corruption": label, "edit": list(edit)}
            env = base_env()
            runs = {
                "inspect": [self.c.fsdpp, "checkpoint", "inspect", step_dir],
                "export": [self.c.fsdpp, "checkpoint", "export", step_dir, "--out", os.path.join(folder, "export")],
                # An explicit --resume DIR: one process (a 2-rank checkpoint loads into any world size).
                "resume_dir": self.c.train_argv(folder, "explicit", 6, self.argv_extra + ["--resume", step_dir]),
            }
            for key, argv in runs.items():
                r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=self.a.resume_limit_s)
                rec[key] = self.judge(r, name)
            # --resume auto on the run itself: must skip the corrupt step-4, saying why, and
            # continue from step 2.
            r = subprocess.run(
                self.c.train_argv(folder, "run", 4, self.argv_extra),
                capture_output=True,
                text=True,
                env=env,
                timeout=self.a.resume_limit_s,
            )
            skipped = [line for line in r.stdout.splitlines() if line.startswith("skipping %s" % target)]
            m = re.search(r"resuming from \S+: (\d+) optimizer steps done", r.stdout)
            rec["resume_auto"] = {
                "exit_code": r.returncode if r.returncode >= 0 else None,
                "signal": signal.Signals(-r.returncode).name if r.returncode < 0 else None,
                "skip_line": skipped[0][:400] if skipped else None,
                "skip_names_file": bool(skipped) and name in skipped[0],
                "resumed_from_step": int(m.group(1)) if m else None,
                "stderr": tail([line for line in r.stderr.splitlines() if line.strip()], 400),
            }
            ra = rec["resume_auto"]
            rec["silent"] = [k2 for k2 in runs if rec[k2]["silent"]] + (
                ["resume_auto"] if ra["resumed_from_step"] == 4 or (ra["exit_code"] == 0 and not skipped) else []
            )
            rec["crashed"] = [k2 for k2 in runs if rec[k2]["crashed"]] + (["resume_auto"] if ra["signal"] else [])
            rec["unclear"] = [
                k2
                for k2 in runs
                if not rec[k2]["silent"]
                and not rec[k2]["crashed"]
                and (rec[k2]["stderr_lines"] != 1 or not rec[k2]["names_file"])
            ]
            if not rec["silent"] and ra["exit_code"] == 0 and not ra["skip_names_file"]:
                rec["unclear"].append("resume_auto")
            rec["ok"] = not rec["silent"] and not rec["crashed"] and not rec["unclear"]
            log(
                "corruption %s / %s: %s%s"
                % (
                    name,
                    label,
                    "ok" if rec["ok"] else "FAILED",
                    ""
                    if rec["ok"]
                    else " (silent %s, crashed %s, unclear %s)" % (rec["silent"], rec["crashed"], rec["unclear"]),
                )
            )
            keep_folder_if_failed(rec, folder, self.a.keep_work)
            recs.append(rec)
        files = sorted({r["file"] for r in recs})
        return {
            "trials": len(recs),
            "files": files,
            "commands_per_trial": ["inspect", "export", "resume_dir", "resume_auto"],
            "silent_acceptances": sum(1 for r in recs if r["silent"]),
            "crashes": sum(1 for r in recs if r["crashed"]),
            "unclear_errors": sum(1 for r in recs if r["unclear"]),
            "passed": all(r["ok"] for r in recs),
        }, recs


# ----------------------------------------------------------------------------- document


def git(*args):
    try:
        return subprocess.run(
            ["git", "-C", REPO] + list(args), capture_output=True, text=True, timeout=30
        ).stdout.strip()
    except OSError:
        return ""


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(next(line for line in f if line.startswith("MemTotal")).split()[1]) * 1024
    except (OSError, StopIteration):
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "hostname": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": load,
    }


def main(argv):
    p = argparse.ArgumentParser(prog="ci/fault_trials.sh", description=__doc__.split("\n\n")[0])
    p.add_argument("out", nargs="?", help="the JSON document (default results/reliability/fault-trials-YYYYMMDD.json)")
    p.add_argument("--trials", type=int, default=100, help="rank-death and crash-during-save trials each (100)")
    p.add_argument("--quick", action="store_true", help="6 trials each, fewer disk-full cases")
    p.add_argument(
        "--only", default="rank_death,crash_during_save,disk_full,corruption", help="comma-separated categories"
    )
    p.add_argument("--fsdpp", default=os.path.join(REPO, "build", "fsdpp"), help="the binary (copied first)")
    p.add_argument("--work", help="scratch folder (default: a new one under $TMPDIR, removed unless --keep-work)")
    p.add_argument("--keep-work", action="store_true", help="keep every trial's folder, not only failed ones")
    p.add_argument("--seed", type=int, help="seed of the random draws (default: from the clock; recorded)")
    p.add_argument("--timeout-s", type=float, default=10.0, help="fsdpp's --timeout-s (collective timeout)")
    p.add_argument(
        "--margin-s",
        type=float,
        default=20.0,
        help="a survivor still running timeout + margin after the kill is a hang",
    )
    p.add_argument("--resume-limit-s", type=float, default=180.0, help="limit for a rerun and other whole runs")
    p.add_argument("--rd-steps", type=int, default=30, help="steps of a rank-death run")
    p.add_argument("--cs-steps", type=int, default=8, help="steps of a crash-during-save run")
    try:
        a = p.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if a.quick:
        a.trials = min(a.trials, 6)
    cats = [x.strip() for x in a.only.split(",") if x.strip()]
    known = {"rank_death", "crash_during_save", "disk_full", "corruption"}
    if not cats or set(cats) - known or a.trials < 1:
        print("ci/fault_trials.sh: --only takes %s; --trials >= 1" % ", ".join(sorted(known)), file=sys.stderr)
        return 2
    if not os.access(a.fsdpp, os.X_OK):
        print("ci/fault_trials.sh: %s is not an executable (build first, or --fsdpp)" % a.fsdpp, file=sys.stderr)
        return 2
    if a.seed is None:
        a.seed = int(time.time())
    started = datetime.datetime.now(datetime.UTC)
    out = a.out or os.path.join(REPO, "results", "reliability", "fault-trials-%s.json" % started.strftime("%Y%m%d"))
    own_work = a.work is None
    a.work = a.work or tempfile.mkdtemp(prefix="fsdpp-fault-trials-")
    os.makedirs(a.work, exist_ok=True)
    a.work = os.path.abspath(a.work)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
        "fsdpp": {
            "path": os.path.abspath(a.fsdpp),
            "sha256": sha256_file(a.fsdpp),
            "version": subprocess.run([a.fsdpp, "--version"], capture_output=True, text=True).stdout.strip(),
        },
        "machine": machine(),
        "command": "ci/fault_trials.sh " + " ".join(argv),
        "parameters": {
            "trials": a.trials,
            "seed": a.seed,
            "collective_timeout_s": a.timeout_s,
            "margin_s": a.margin_s,
            "hang_after_s": a.timeout_s + a.margin_s,
            "rerun_limit_s": a.resume_limit_s,
            "rank_death_steps": a.rd_steps,
            "crash_during_save_steps": a.cs_steps,
            "model": " ".join(MODEL),
            "stack_sampler": shutil.which("eu-stack"),
        },
        "categories": {},
        "trials": {},
    }
    status = 0
    try:
        c = Campaign(a)
        t_all = time.monotonic()
        for cat in cats:
            t = time.monotonic()
            log("category %s" % cat)
            if cat == "rank_death":
                summary, recs = RankDeath(c).campaign(a.trials)
            elif cat == "crash_during_save":
                summary, recs = CrashDuringSave(c).campaign(a.trials)
            elif cat == "disk_full":
                summary, recs = DiskFull(c).campaign(a.quick)
            else:
                summary, recs = Corruption(c).campaign()
            summary["seconds"] = round(time.monotonic() - t, 1)
            doc["categories"][cat] = summary
            doc["trials"][cat] = recs
            log("%s: %s" % (cat, json.dumps({k: v for k, v in summary.items() if not isinstance(v, (dict, list))})))
        doc["seconds"] = round(time.monotonic() - t_all, 1)
    except SetupError as e:
        print("ci/fault_trials.sh: %s" % e, file=sys.stderr)
        doc["setup_error"] = str(e)
        status = 2
    doc["all_targets_met"] = status == 0 and all(s["passed"] for s in doc["categories"].values())
    write_json_atomically(out, doc)
    log("wrote %s" % out)
    if own_work and not a.keep_work and doc["all_targets_met"]:
        shutil.rmtree(a.work, ignore_errors=True)
    else:
        log("trial folders kept in %s" % a.work)
    if status:
        return status
    return 0 if doc["all_targets_met"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
