#!/usr/bin/env python3
"""Combines the GPU cells of ci/gpu_bench.sh into one results document.

Usage: ci/gpu_results.py BUILD_DIR CELLS_DIR OUT_DIR

Writes OUT_DIR/gpu-<gpu>-<date>.json, format "fsdpp.results" version 0 (spec:
results/README.md): run id, timestamp, git commit (FSDPP_COMMIT, as the runner checked it
out), command, machine fingerprint, and per cell the raw fsdpp and PyTorch records plus
their ratios. MFU is recomputed for both sides with fsdpp's FLOPs-per-token formula and
the bf16 matmul peak fsdpp measured in the same cell, so both use one yardstick.
"""
import datetime
import glob
import json
import os
import platform
import re
import subprocess
import sys
import uuid


def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def fingerprint(build_dir):
    import torch
    gpus = []
    for line in (sh("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader") or "").splitlines():
        name, mem, driver = [x.strip() for x in line.split(",")]
        gpus.append({"name": name, "memory": mem, "driver": driver})
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)
    mem_kb = next((int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
    compiler = None
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        m = re.search(r"^CMAKE_CXX_COMPILER:\w+=(.*)$", open(cache).read(), re.M)
        if m:
            compiler = sh(m.group(1), "--version")
            compiler = compiler.splitlines()[0] if compiler else m.group(1)
    return {"cpu_model": cpu, "cpu_cores": os.cpu_count(), "memory_bytes": mem_kb * 1024,
            "gpus": gpus, "gpu_count": len(gpus), "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "libtorch": torch.__version__,
            "compiler": compiler, "os": platform.platform()}


def main():
    build_dir, cells_dir, out_dir = sys.argv[1:4]
    fp = fingerprint(build_dir)
    cells = []
    for path in sorted(glob.glob(os.path.join(cells_dir, "fsdpp-*.json"))):
        tag = os.path.basename(path)[len("fsdpp-"):-len(".json")]
        ours = json.load(open(path))
        peer_path = os.path.join(cells_dir, "torch-" + tag + ".json")
        peer = json.load(open(peer_path)) if os.path.exists(peer_path) else None
        fpt, peak = ours["model_flops_per_token"], ours["matmul_peak_flops_per_s"]
        world = ours["config"]["world_size"]
        cell = {"cell": tag, "config": ours["config"], "fsdpp": ours, "pytorch_fsdp2": peer,
                "units": {"tokens_per_s": "tokens/s (all ranks)", "step_ms": "ms", "memory": "bytes",
                          "mfu": "fraction of the measured bf16 matmul peak"},
                "mfu": {"fsdpp": ours["tokens_per_s"] / world * fpt / peak}}
        if peer:
            peer_mem = max(r["max_memory_allocated_bytes"] or 0 for r in peer["memory"]["per_rank"])
            cell["mfu"]["pytorch_fsdp2"] = peer["tokens_per_s"] / world * fpt / peak
            cell["ratios"] = {"tokens_per_s_fsdpp_over_pytorch": ours["tokens_per_s"] / peer["tokens_per_s"],
                              "peak_allocated_fsdpp_over_pytorch": ours["memory_bytes"]["peak_allocated"] / peer_mem}
            cell["pytorch_peak_allocated_bytes"] = peer_mem
        cells.append(cell)
    now = datetime.datetime.now(datetime.timezone.utc)
    doc = {"format": "fsdpp.results", "version": 0, "run_id": str(uuid.uuid4()),
           "timestamp": now.isoformat(), "git_commit": os.environ.get("FSDPP_COMMIT"),
           "git_dirty": os.environ.get("FSDPP_DIRTY") == "1", "command": "ci/gpu_bench.sh",
           "machine": fp, "cells": cells}
    gpu = re.sub(r"[^A-Za-z0-9]+", "-", fp["gpus"][0]["name"] if fp["gpus"] else "cpu").strip("-").lower()
    path = os.path.join(out_dir, "gpu-%s-%s.json" % (gpu, now.strftime("%Y%m%dT%H%M%SZ")))
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
    print("results: " + path)
    for c in cells:
        r = c.get("ratios", {})
        print("%-22s fsdpp %9.0f tok/s MFU %5.1f%% peak %6.2f GB | pytorch %s" % (
            c["cell"], c["fsdpp"]["tokens_per_s"], 100 * c["mfu"]["fsdpp"],
            c["fsdpp"]["memory_bytes"]["peak_allocated"] / 1e9,
            "%9.0f tok/s MFU %5.1f%% peak %6.2f GB | ratio tok/s %.3f mem %.3f" % (
                c["pytorch_fsdp2"]["tokens_per_s"], 100 * c["mfu"]["pytorch_fsdp2"],
                c["pytorch_peak_allocated_bytes"] / 1e9, r["tokens_per_s_fsdpp_over_pytorch"],
                r["peak_allocated_fsdpp_over_pytorch"]) if c["pytorch_fsdp2"] else "missing"))


if __name__ == "__main__":
    main()
