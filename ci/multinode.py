#!/usr/bin/env python3
"""The runs and checks of ci/multinode.sh, which makes the two hosts (network namespaces
joined by a veth pair) and removes them. Standard library only.

Runs, in order: a single-host 4-rank run (`--nproc 4`, loopback) as the reference; three
2x2 runs across the namespaces (ranks placed in blocks with Gloo's default device found
from each host's name; in blocks with GLOO_SOCKET_IFNAME; cyclically, as the control for
where the shard groups lie); then a long 2x2 run whose link is cut after a few steps.
Writes OUT/multinode-YYYYMMDD.json: format "fsdpp.multinode-run", version 1, specified
in ci/multinode.md. Exit 0 when every check held, 1 otherwise.
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from results_file import write_json_atomically  # noqa: E402

FORMAT, VERSION = "fsdpp.multinode-run", 1
RANKS_PER_HOST = 2
WORLD_SIZE = 2 * RANKS_PER_HOST
MASTER_PORT = 29500  # each namespace has its own ports: nothing else can hold it
COMPARE_STEPS = 4
CUT_AFTER_STEP = 3
COMPARE_TIMEOUT_S = 60.0  # generous: four ranks start on a busy 2-core machine
COMPARE_DEADLINE_S = 90.0
# The run under test. --hybrid-shard-size is the ranks per host, as
# ci/pipelines/slurm_multinode.sbatch passes it.
TRAIN_FLAGS = [
    "--strategy",
    "hybrid_shard",
    "--hybrid-shard-size",
    str(RANKS_PER_HOST),
    "--deterministic",
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
    "--lr",
    "3e-3",
    "--warmup-steps",
    "1",
    "--grad-clip",
    "0.5",
    "--seed",
    "7",
    "--log-freq",
    "1",
]
# Variables of an enclosing launcher that would override the SLURM ones this test sets.
FOREIGN_ENV = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "FSDPP_LAUNCH_CHILD",
    "FSDPP_STATUS_FD",
    "FSDPP_BOUND_CPUS",
}
OP_NAME = re.compile(r"\b(all_gather\w*|reduce_scatter\w*|all_reduce\w*|all_to_all\w*|broadcast\w*|barrier)\b")

children = []  # every rank process started, killed by id on any way out


class Host:
    def __init__(self, spec, index):
        self.name, self.ns, self.veth, self.addr = spec.split(",")
        self.index = index

    def link_bytes(self):
        """Bytes this host's veth sent and received so far (the kernel's counters)."""
        text = subprocess.run(
            ["ip", "-n", self.ns, "-s", "-j", "link", "show", "dev", self.veth],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        stats = json.loads(text)[0]["stats64"]
        return {"tx": stats["tx"]["bytes"], "rx": stats["rx"]["bytes"]}


def write_tokens(path, count=4000, vocab=64):
    """A learnable llm.c token file (core/data/TOKENS.md): each token mostly follows from
    the previous one, so the loss falls within a few steps."""
    tokens, t, state = [], 1, 11
    for _ in range(count):
        state = (state * 1103515245 + 12345) % 2**31
        t = (t * 5 + 3 + (state >> 16) % 3) % vocab
        tokens.append(t)
    header = [20240520, 1, count] + [0] * 253
    with open(path, "wb") as f:
        f.write(b"".join(v.to_bytes(4, "little", signed=True) for v in header))
        f.write(b"".join(v.to_bytes(2, "little") for v in tokens))


def clean_env():
    return {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV and not k.startswith("SLURM_")}


def read_metrics(run_dir):
    """The train records of a run's metrics.jsonl, in file order."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r for r in records if r.get("kind") == "train"]


def curve(records):
    """Per step: the loss and grad norm as exact doubles (hex), and the loss for reading."""
    return [
        {
            "step": r["step"],
            "loss": r["loss"],
            "loss_hex": float(r["loss"]).hex(),
            "grad_norm_hex": float(r["grad_norm"]).hex(),
        }
        for r in records
    ]


def file_sha256(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def lines_of(path):
    with open(path, errors="replace") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


class Ranks:
    """Four `fsdpp train` processes, one per rank, each in its host's namespace under that
    host's name (unshare --uts), started from SLURM variables; their exits are timed."""

    def __init__(self, fsdpp, hosts, nodelist, placement, device, run_dir, log_dir, flags):
        self.procs, self.ends, self.hosts_of, self.logs = [], [None] * WORLD_SIZE, [], []
        self.threads = []
        os.makedirs(log_dir, exist_ok=True)
        for rank in range(WORLD_SIZE):
            if placement == "block":  # SLURM's default distribution
                host, local = hosts[rank // RANKS_PER_HOST], rank % RANKS_PER_HOST
            else:  # --distribution=cyclic
                host, local = hosts[rank % len(hosts)], rank // len(hosts)
            env = clean_env()
            env.update(
                {
                    "SLURM_JOB_NODELIST": nodelist,
                    "SLURM_NNODES": str(len(hosts)),
                    "SLURM_JOB_NUM_NODES": str(len(hosts)),
                    "SLURM_NTASKS": str(WORLD_SIZE),
                    "SLURM_NTASKS_PER_NODE": str(RANKS_PER_HOST),
                    "SLURM_TASKS_PER_NODE": f"{RANKS_PER_HOST}(x{len(hosts)})",
                    "SLURM_PROCID": str(rank),
                    "SLURM_LOCALID": str(local),
                    "SLURM_NODEID": str(host.index),
                    "MASTER_PORT": str(MASTER_PORT),
                }
            )
            if device == "ifname":
                env["GLOO_SOCKET_IFNAME"] = host.veth
            out = os.path.join(log_dir, f"rank{rank}.out")
            err = os.path.join(log_dir, f"rank{rank}.err")
            argv = [
                "ip",
                "netns",
                "exec",
                host.ns,
                "unshare",
                "--uts",
                "--",
                "sh",
                "-c",
                'hostname "$0" && exec "$@"',
                host.name,
                fsdpp,
                "train",
                "--save-dir",
                os.path.dirname(run_dir),
                "--experiment-name",
                os.path.basename(run_dir),
            ] + flags
            with open(out, "w") as o, open(err, "w") as e:
                proc = subprocess.Popen(argv, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL)
            children.append(proc)
            self.procs.append(proc)
            self.hosts_of.append(host)
            self.logs.append((out, err))
            thread = threading.Thread(target=self._wait, args=(rank,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _wait(self, rank):
        self.procs[rank].wait()
        self.ends[rank] = time.monotonic()

    def finish(self, deadline_s):
        """Waits until every rank exits or deadline_s passes; kills the rest. Returns the
        ranks that had to be killed."""
        stop = time.monotonic() + deadline_s
        for thread in self.threads:
            thread.join(max(0.0, stop - time.monotonic()))
        killed = [r for r, p in enumerate(self.procs) if p.poll() is None]
        for rank in killed:
            self.procs[rank].kill()
        for thread in self.threads:
            thread.join()
        return killed

    def any_exited(self):
        return any(p.poll() is not None for p in self.procs)

    def world_lines(self):
        out = []
        for stdout, _ in self.logs:
            out += [line for line in lines_of(stdout) if line.startswith("world: ")]
        return out


def run_single(fsdpp, work, data):
    run_dir = os.path.join(work, "runs", "single-host")
    argv = [
        fsdpp,
        "train",
        "--nproc",
        str(WORLD_SIZE),
        "--timeout-s",
        str(COMPARE_TIMEOUT_S),
        "--save-dir",
        os.path.dirname(run_dir),
        "--experiment-name",
        "single-host",
        "--max-steps",
        str(COMPARE_STEPS),
        "--data",
        data,
    ] + TRAIN_FLAGS
    start = time.monotonic()
    with open(os.path.join(work, "single-host.log"), "w") as log:
        proc = subprocess.Popen(argv, env=clean_env(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        children.append(proc)
        try:
            code = proc.wait(COMPARE_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    return {
        "command": " ".join(["fsdpp"] + argv[1:]),
        "wall_s": round(time.monotonic() - start, 3),
        "exit_code": code,
        "steps": curve(read_metrics(run_dir)),
        "weights_sha256": file_sha256(os.path.join(run_dir, "hf", "model.safetensors")),
    }


def shard_groups(shard_size):
    """HYBRID_SHARD's shard groups as core/comm/device_mesh.cpp forms them: rows of
    shard_size consecutive world ranks."""
    return [list(range(g, g + shard_size)) for g in range(0, WORLD_SIZE, shard_size)]


def run_2x2(fsdpp, work, data, hosts, nodelist, placement, device, single):
    name = f"2x2-{placement}-{device}"
    run_dir = os.path.join(work, "runs", name)
    before = [h.link_bytes() for h in hosts]
    start = time.monotonic()
    ranks = Ranks(
        fsdpp,
        hosts,
        nodelist,
        placement,
        device,
        run_dir,
        os.path.join(work, "logs", name),
        ["--timeout-s", str(COMPARE_TIMEOUT_S), "--max-steps", str(COMPARE_STEPS), "--data", data] + TRAIN_FLAGS,
    )
    killed = ranks.finish(COMPARE_DEADLINE_S)
    wall_s = time.monotonic() - start
    after = [h.link_bytes() for h in hosts]
    steps = curve(read_metrics(run_dir))
    host_of_rank = [h.name for h in ranks.hosts_of]
    groups = shard_groups(RANKS_PER_HOST)
    records = read_metrics(run_dir)
    return {
        "name": name,
        "placement": placement,
        "gloo_device": "GLOO_SOCKET_IFNAME=<veth>" if device == "ifname" else "host name (createDefaultDevice)",
        "wall_s": round(wall_s, 3),
        "exit_codes": [p.returncode for p in ranks.procs],
        "killed_ranks": killed,
        "host_of_rank": host_of_rank,
        "world_lines": ranks.world_lines(),
        "shard_groups": groups,
        "shard_groups_within_host": all(len({host_of_rank[r] for r in g}) == 1 for g in groups),
        "veth_bytes": {h.name: {k: after[i][k] - before[i][k] for k in ("tx", "rx")} for i, h in enumerate(hosts)},
        "rank0_all_gather_bytes": sum(r["comm_bytes_sent"]["all_gather"] for r in records),
        "steps": steps,
        "losses_bitwise_equal_single_host": bool(steps) and steps == single["steps"],
        "weights_bytes_equal_single_host": (
            single["weights_sha256"] is not None
            and file_sha256(os.path.join(run_dir, "hf", "model.safetensors")) == single["weights_sha256"]
        ),
    }


def error_message(lines):
    """The rank's last `fsdpp: error:` line, else its last stderr line."""
    errors = [line for line in lines if line.startswith("fsdpp: error:")]
    return errors[-1] if errors else (lines[-1] if lines else "")


def names_peer(message, rank, own_host, hosts):
    """Whether a failure message names the other end: another rank ("rank 0 is gone",
    "ranks 2, 3 on mnode2"), or the other host's name or address, once this rank's own
    "(rank N of M)" and the failure board's "(seen by rank N)" are taken out."""
    text = re.sub(r"\(rank \d+ of \d+\)|\(seen by rank \d+\)", "", message)
    others = [int(n) for group in re.findall(r"\branks? (\d+(?:, \d+)*)", text) for n in group.split(", ")]
    if any(n != rank for n in others):
        return True
    other_hosts = [h for h in hosts if h.name != own_host.name]
    words = [re.escape(h.name) + r"\b" for h in other_hosts] + [re.escape(h.addr) + r"\b" for h in other_hosts]
    return any(re.search(w, text) for w in words)


def run_link_cut(fsdpp, work, data, hosts, nodelist, timeout_s, margin_s):
    name = "2x2-link-cut"
    run_dir = os.path.join(work, "runs", name)
    cut_host = hosts[1]
    ranks = Ranks(
        fsdpp,
        hosts,
        nodelist,
        "block",
        "host",
        run_dir,
        os.path.join(work, "logs", name),
        ["--timeout-s", str(timeout_s), "--max-steps", "1000000", "--data", data] + TRAIN_FLAGS,
    )
    start = time.monotonic()
    rank0_out = ranks.logs[0][0]
    marker = re.compile(rf"^step {CUT_AFTER_STEP}/", re.MULTILINE)
    reached = False
    while time.monotonic() - start < COMPARE_DEADLINE_S and not ranks.any_exited():
        with open(rank0_out, errors="replace") as f:
            if marker.search(f.read()):
                reached = True
                break
        time.sleep(0.05)
    # Rank 0 hosts the store and, after its own failure, lingers up to min(T, 3 s) for the
    # others to read the failure board (core/comm/communicator.h): part of its bound.
    linger_s = min(timeout_s, 3.0)
    result = {
        "timeout_s": timeout_s,
        "margin_s": margin_s,
        "store_host_linger_s": linger_s,
        "bound_s": timeout_s + linger_s + margin_s,
        "cut_after_step": CUT_AFTER_STEP,
        "cut_host": cut_host.name,
        "cut_command": f"ip -n {cut_host.ns} link set {cut_host.veth} down",
    }
    if not reached:
        ranks.finish(0)
        result.update(
            {
                "reached_cut": False,
                "exit_codes": [p.returncode for p in ranks.procs],
                "stderr_tails": [lines_of(err)[-3:] for _, err in ranks.logs],
            }
        )
        return result
    t_cut = time.monotonic()
    subprocess.run(["ip", "-n", cut_host.ns, "link", "set", cut_host.veth, "down"], check=True)
    cut_command_s = time.monotonic() - t_cut
    with open(rank0_out, errors="replace") as f:
        steps_seen = re.findall(r"^step (\d+)/", f.read(), re.MULTILINE)
    killed = ranks.finish(timeout_s + linger_s + margin_s + 30)
    per_rank = []
    for rank, proc in enumerate(ranks.procs):
        lines = lines_of(ranks.logs[rank][1])
        message = error_message(lines)
        per_rank.append(
            {
                "rank": rank,
                "host": ranks.hosts_of[rank].name,
                "exit_code": proc.returncode,
                "killed_by_test": rank in killed,
                "exit_after_cut_s": None if rank in killed else round(ranks.ends[rank] - t_cut, 3),
                "message": message,
                "last_stderr_lines": lines[-3:],
                "names_op": bool(OP_NAME.search(message)),
                "names_peer": names_peer(message, rank, ranks.hosts_of[rank], hosts),
            }
        )
    result.update(
        {
            "reached_cut": True,
            "cut_at_s_after_start": round(t_cut - start, 3),
            "cut_command_s": round(cut_command_s, 3),
            "last_step_logged_by_rank0": int(steps_seen[-1]) if steps_seen else None,
            "ranks": per_rank,
        }
    )
    return result


def check(doc, require_peer):
    failures = []
    single = doc["single_host"]
    if single["exit_code"] != 0 or len(single["steps"]) != COMPARE_STEPS:
        failures.append(f"single-host run: exit {single['exit_code']}, {len(single['steps'])} steps logged")
    for run in doc["runs"]:
        name = run["name"]
        if any(c != 0 for c in run["exit_codes"]):
            failures.append(f"{name}: exit codes {run['exit_codes']}")
        if not run["losses_bitwise_equal_single_host"]:
            failures.append(f"{name}: losses or grad norms differ from the single-host run's")
        if not run["weights_bytes_equal_single_host"]:
            failures.append(f"{name}: exported weights differ from the single-host run's")
        if any(v["tx"] == 0 or v["rx"] == 0 for v in run["veth_bytes"].values()):
            failures.append(f"{name}: nothing crossed the veth pair")
        if run["placement"] == "block" and not run["shard_groups_within_host"]:
            failures.append(f"{name}: a shard group spans hosts")
    if not doc["shard_group_traffic"]["shard_traffic_stays_in_host"]:
        failures.append("shard-group traffic: " + json.dumps(doc["shard_group_traffic"]))
    cut = doc["link_cut"]
    if not cut.get("reached_cut"):
        failures.append(f"link cut: the run did not reach step {CUT_AFTER_STEP} (exit codes {cut.get('exit_codes')})")
    else:
        for r in cut["ranks"]:
            where = f"link cut, rank {r['rank']} ({r['host']})"
            if r["killed_by_test"]:
                failures.append(f"{where}: still running {cut['bound_s'] + 30:.0f} s after the cut")
                continue
            if r["exit_code"] == 0:
                failures.append(f"{where}: exit code 0")
            if r["exit_after_cut_s"] > cut["bound_s"]:
                failures.append(
                    f"{where}: exited {r['exit_after_cut_s']:.2f} s after the cut, bound {cut['bound_s']:.1f} s"
                )
            if not r["names_op"]:
                failures.append(f"{where}: message names no collective: {r['message']!r}")
            if require_peer and not r["names_peer"]:
                failures.append(f"{where}: message names no peer: {r['message']!r}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fsdpp", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--host", action="append", required=True, help="NAME,NETNS,VETH,ADDRESS (twice)")
    parser.add_argument("--nodelist", default="mnode[1-2]")
    parser.add_argument("--timeout-s", type=float, default=5.0)
    parser.add_argument("--margin-s", type=float, default=5.0)
    parser.add_argument("--require-peer", action="store_true")
    args = parser.parse_args()
    hosts = [Host(spec, i) for i, spec in enumerate(args.host)]
    if len(hosts) != 2:
        parser.error("--host twice")
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.monotonic()
    data = os.path.join(args.work, "tokens.bin")
    write_tokens(data)
    version = subprocess.run([args.fsdpp, "--version"], check=True, capture_output=True, text=True).stdout.splitlines()

    print(f"multinode: single-host reference, --nproc {WORLD_SIZE} on loopback", flush=True)
    single = run_single(args.fsdpp, args.work, data)
    runs = []
    for placement, device in (("block", "host"), ("block", "ifname"), ("cyclic", "host")):
        print(
            f"multinode: 2 hosts x {RANKS_PER_HOST} ranks, {placement} placement, Gloo device by {device}", flush=True
        )
        runs.append(run_2x2(args.fsdpp, args.work, data, hosts, args.nodelist, placement, device, single))
    # Where the shard groups lie, seen from outside: with cyclic placement every rank's
    # shard partner is on the other host, so the parameters' all-gathers cross the link;
    # with block placement they must not. Everything else (the world-size-invariant
    # all-to-all over all four ranks) crosses the same amount in both.
    block, cyclic = runs[0], runs[2]

    def crossed(run):
        return sum(run["veth_bytes"][hosts[0].name].values())

    predicted = WORLD_SIZE * cyclic["rank0_all_gather_bytes"]
    traffic = {
        "block_veth_bytes": crossed(block),
        "cyclic_veth_bytes": crossed(cyclic),
        "predicted_all_gather_bytes_across_if_groups_span_hosts": predicted,
        "cyclic_minus_block_bytes": crossed(cyclic) - crossed(block),
        "shard_traffic_stays_in_host": predicted > 0 and crossed(cyclic) - crossed(block) >= predicted / 2,
    }
    print(f"multinode: link cut after step {CUT_AFTER_STEP}, --timeout-s {args.timeout_s:g}", flush=True)
    cut = run_link_cut(args.fsdpp, args.work, data, hosts, args.nodelist, args.timeout_s, args.margin_s)

    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "created_utc": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fsdpp_version": version,
        "machine": {
            "cores": os.cpu_count(),
            "kernel": os.uname().release,
            "load_average_at_end": [float(x) for x in load],
        },
        "topology": {
            "nodelist": args.nodelist,
            "ranks_per_host": RANKS_PER_HOST,
            "master_port": MASTER_PORT,
            "hosts": [{"name": h.name, "netns": h.ns, "veth": h.veth, "address": h.addr} for h in hosts],
        },
        "train_flags": " ".join(TRAIN_FLAGS),
        "compare_steps": COMPARE_STEPS,
        "single_host": single,
        "runs": runs,
        "shard_group_traffic": traffic,
        "link_cut": cut,
    }
    failures = check(doc, args.require_peer)
    doc["wall_s"] = round(time.monotonic() - t0, 3)
    doc["verdict"] = {"pass": not failures, "failures": failures, "peer_named_required": args.require_peer}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"multinode-{started:%Y%m%d}.json")
    write_json_atomically(path, doc)

    for run in runs:
        print(
            f"multinode: {run['name']:<22} exit {run['exit_codes']}, {run['wall_s']:.1f} s, losses bitwise equal: "
            f"{run['losses_bitwise_equal_single_host']}, weights equal: {run['weights_bytes_equal_single_host']}, "
            f"veth {run['veth_bytes']}"
        )
    print("multinode: shard-group traffic: " + json.dumps(traffic))
    for r in cut.get("ranks", []):
        print(
            f"multinode: cut: rank {r['rank']} on {r['host']} exit {r['exit_code']} after {r['exit_after_cut_s']} s: "
            + r["message"]
        )
    for failure in failures:
        print("multinode: FAIL " + failure)
    print(f"multinode: {'passed' if not failures else 'FAILED'} in {doc['wall_s']:.1f} s; wrote {path}")
    return 0 if not failures else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        sys.exit(main())
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
