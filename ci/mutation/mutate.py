#!/usr/bin/env python3
"""fsdpp's mutation score: mutant schemata of core/, one build, tests chosen by coverage.

The spec (statuses, the document's format, the operators, how mutants are sampled) is
ci/mutation/MUTATION.md. Subcommands, each reading and writing the work folder (--work):

  plan     find every mutant of the covered directories, sample N per directory (--seed)
  build    copy the tree to WORK/src, write the sampled mutants in as schemata, build it once
           (ci/build.sh); mutants the compiler rejects are dropped as "did not compile"
  trace    run every GoogleTest group of ctest once with no mutant on, recording which test
           reaches which mutant (the coverage) and which tests fail unmutated
  run      each mutant on (FSDPP_MUTANT=ID) against the tests that reach it, cheapest first,
           until one fails (killed) or all pass (survived)
  confirm  the tests added to kill survivors (ci/mutation/kills.json), run against their mutants
           carried into a build of this tree: each must fail with its mutant on, pass with it off
  report   the versioned JSON document and a table per directory

  python3 ci/mutation/mutate.py plan --work /tmp/fsdpp-mutants --per-dir 6 --seed 1
  python3 ci/mutation/mutate.py build --work /tmp/fsdpp-mutants
  python3 ci/mutation/mutate.py trace --work /tmp/fsdpp-mutants -j 2
  python3 ci/mutation/mutate.py run --work /tmp/fsdpp-mutants -j 2
  python3 ci/mutation/mutate.py confirm --work /tmp/fsdpp-mutants
  python3 ci/mutation/mutate.py report --work /tmp/fsdpp-mutants --out results/mutation/DATE-pilot.json
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sites  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DIRS = ["fsdp", "comm", "checkpoint", "optim", "train"]
DOC_VERSION = 1
# ctest entries that are not GoogleTest groups of fsdpp's suites are left out: the Python
# judges and peers (references.*, peers.*), benchmarks, lint, docs, fuzz and examples. Leaving
# tests out can only lower the score.
GTEST_RUNNER = "run_gtest_group.sh"


def load(path: Path):
    return json.loads(path.read_text())


def save(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def built_sources(repo: Path, dirs: list[str]) -> list[str]:
    """The .cpp files of the directories in fsdpp_core's add_library() list (core/CMakeLists.txt).
    The sources added after it (the CUDA plugin's, comm/nccl_*.cpp and the rest: GPU paths no CPU
    test reaches; and the plugin's stand-ins in the core) are left out."""
    cmake = (repo / "core/CMakeLists.txt").read_text()
    listing = re.search(r"add_library\(fsdpp_core STATIC(.*?)\)", cmake, re.S)
    if listing is None:
        raise SystemExit("mutate.py: core/CMakeLists.txt has no add_library(fsdpp_core STATIC ...)")
    names = re.findall(r"\b([a-z_]+/[a-z0-9_]+\.cpp)\b", listing.group(1))
    return sorted({"core/" + n for n in names if n.split("/")[0] in dirs})


def suite_targets(repo: Path) -> list[str]:
    """The GoogleTest suite binaries ctest runs as groups (suites/CMakeLists.txt), and fsdpp, which
    the CLI tests run: what `build` builds (not the fuzz driver, benchmarks or CUDA tests)."""
    cmake = (repo / "suites/CMakeLists.txt").read_text()
    names = re.findall(r"^\s*fsdpp_suite\((\w+)", cmake, re.M) + re.findall(r"fsdpp_add_gtest_groups\((\w+)", cmake)
    return sorted({n for n in names if n != "${name}"} | {"fsdpp"})


def git_commit(repo: Path) -> str:
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    return out.stdout.strip()


def cmd_plan(args) -> None:
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    population: dict[str, list[sites.Mutant]] = {d: [] for d in args.dirs}
    for rel in built_sources(REPO, args.dirs):
        population[rel.split("/")[1]] += sites.find_mutants(rel, (REPO / rel).read_text())
    rng = random.Random(args.seed)
    chosen = []
    for d in args.dirs:
        pool = sorted(population[d], key=lambda m: m.key)
        chosen += rng.sample(pool, min(args.per_dir, len(pool)))
    chosen.sort(key=lambda m: (m.file, m.region, m.key))
    for i, m in enumerate(chosen, 1):
        m.id = i
    plan = {
        "version": DOC_VERSION,
        "commit": git_commit(REPO),
        "seed": args.seed,
        "per_dir": args.per_dir,
        "population": {d: len(population[d]) for d in args.dirs},
        "population_by_operator": {
            d: {
                op: sum(1 for m in population[d] if m.operator == op)
                for op in sorted({m.operator for m in population[d]})
            }
            for d in args.dirs
        },
        "files": {rel: sha256_of(REPO / rel) for rel in sorted({m.file for m in chosen})},
        "mutants": [mutant_record(m) for m in chosen],
    }
    save(work / "plan.json", plan)
    print(f"plan: {len(chosen)} mutants sampled of {sum(plan['population'].values())} ({work / 'plan.json'})")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def mutant_record(m: sites.Mutant) -> dict:
    return {
        "id": m.id,
        "key": m.key,
        "file": m.file,
        "dir": m.file.split("/")[1],
        "line": m.line,
        "column": m.column,
        "operator": m.operator,
        "original": m.original,
        "replacement": m.replacement,
        "region": list(m.region),
        "kind": m.kind,
        "text": m.text,
    }


def record_mutant(r: dict) -> sites.Mutant:
    m = sites.Mutant(
        r["file"], r["line"], r["column"], r["operator"], r["original"], r["replacement"],
        tuple(r["region"]), r["kind"], r["text"],
    )  # fmt: skip
    m.id = r["id"]
    return m


def copy_tree(src: Path, dst: Path, refresh: bool = False) -> None:
    """The tracked and untracked-but-not-ignored files of the repository, mtimes kept; with
    refresh, a file already there is copied again where its content differs, stamped now so
    that the build sees it as newer than what it built from the old copy."""
    listing = subprocess.run(
        ["git", "-C", str(src), "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listing.split("\0")):
        source, target = src / rel, dst / rel
        if not source.is_file():
            continue
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif refresh and not filecmp.cmp(source, target, False):
            shutil.copy(source, target)  # a new mtime: the source's may be older than the copy's objects
    for link in (".venv", ".cache"):
        if (src / link).exists() and not (dst / link).exists():
            (dst / link).symlink_to((src / link).resolve())


def write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


RUNTIME_HOSTS = ["core/CMakeLists.txt", "CMakeLists.txt", "harness/testing/test_main.cpp"]


def snapshot(work: Path, refresh: bool = False) -> Path:
    """WORK/orig: the mutated directories' sources and the files install_runtime patches, copied
    from the tree at the first build and read from there by every round after: the tree is a
    working tree, and an edit made while a campaign builds must not reach its copy."""
    orig = work / "orig"
    for rel in [*built_sources(REPO, DIRS), *RUNTIME_HOSTS]:
        if refresh or not (orig / rel).exists():
            (orig / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, orig / rel)
    return orig


def install_runtime(src: Path, orig: Path) -> None:
    """The switch (core/fsdpp_mutant_switch.cpp) and the test labeller (harness/testing/test_main.cpp)."""
    write_if_changed(src / "core/fsdpp_mutant_switch.cpp", (HERE / "runtime/mutant_switch.cpp").read_text())
    cmake = (orig / "core/CMakeLists.txt").read_text()
    cmake += (
        "\n# ci/mutation/mutate.py: the mutant switch, outside the unity batches\n"
        "target_sources(fsdpp_core PRIVATE fsdpp_mutant_switch.cpp)\n"
        "set_source_files_properties(fsdpp_mutant_switch.cpp PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON"
        " SKIP_PRECOMPILE_HEADERS ON)\n"
    )
    write_if_changed(src / "core/CMakeLists.txt", cmake)
    # -Werror everywhere but fsdpp_core: a mutant that only warns is run, and every other unit keeps
    # the flags of ci/build.sh, so ccache serves the unmutated suites and harness from a CI build.
    top = (orig / "CMakeLists.txt").read_text()
    werror = "$<BUILD_INTERFACE:-Werror>"
    if top.count(werror) != 1:
        raise SystemExit(f"mutate.py: CMakeLists.txt has no single '{werror}' to keep off fsdpp_core")
    top = top.replace(werror, "$<BUILD_INTERFACE:$<$<NOT:$<STREQUAL:$<TARGET_PROPERTY:NAME>,fsdpp_core>>:-Werror>>")
    write_if_changed(src / "CMakeLists.txt", top)
    main = (orig / "harness/testing/test_main.cpp").read_text()
    if "return RUN_ALL_TESTS();" not in main or "int main(" not in main:
        raise SystemExit("mutate.py: harness/testing/test_main.cpp has no 'return RUN_ALL_TESTS();' to hook")
    main = main.replace("int main(", "void fsdpp_mutant_install_labeler();\n\nint main(", 1)
    main = main.replace("return RUN_ALL_TESTS();", "fsdpp_mutant_install_labeler();\n  return RUN_ALL_TESTS();", 1)
    write_if_changed(src / "harness/testing/test_main.cpp", main + (HERE / "runtime/test_listener.inc").read_text())


def write_mutants(src: Path, orig: Path, mutants: list[sites.Mutant]) -> dict[str, dict[int, tuple[int, int, int]]]:
    by_file: dict[str, list[sites.Mutant]] = {}
    for m in mutants:
        by_file.setdefault(m.file, []).append(m)
    spans = {}
    for rel in built_sources(orig, DIRS):
        text, spans[rel] = sites.apply_schemata((orig / rel).read_text(), by_file.get(rel, []))
        write_if_changed(src / rel, text)
    return spans


RE_LOCATION = re.compile(r"^(/[^:\s]+):(\d+):(\d+): *(error|fatal error|required from).*$", re.M)


def blame(log: str, src: Path, spans: dict, live: set[int]) -> dict[int, str]:
    """The mutants a failed build's errors point at, each with the first error that named it: the
    mutant whose part of the schema holds the error's column, else every mutant on that line."""
    guilty: dict[int, str] = {}
    first_error = ""
    for m in RE_LOCATION.finditer(log):
        if m.group(4) != "required from":
            first_error = m.group(0)
        path, line, col = m.group(1), int(m.group(2)), int(m.group(3))
        try:
            rel = str(Path(path).resolve().relative_to(src.resolve()))
        except ValueError:
            continue
        on_line = {i: s for i, s in spans.get(rel, {}).items() if s[0] == line and i in live}
        hit = {i for i, (_, a, b) in on_line.items() if a <= col <= b} or set(on_line)
        for i in hit:
            guilty.setdefault(i, first_error or m.group(0))
    return guilty


def build_env(work: Path, jobs: int, targets: list[str]) -> dict:
    return dict(os.environ, FSDPP_BUILD_DIR=str(work / "src/build"), FSDPP_JOBS=str(jobs), FSDPP_WERROR="ON",
                FSDPP_BUILD_TARGETS=" ".join(targets))  # fmt: skip


def cmd_build(args) -> None:
    work = Path(args.work)
    src = work / "src"
    plan = load(work / "plan.json")
    mutants = [record_mutant(r) for r in plan["mutants"]]
    targets = args.targets.split() if args.targets else suite_targets(REPO)
    copy_tree(REPO, src)
    orig = snapshot(work)
    changed = [rel for rel, digest in plan["files"].items() if sha256_of(orig / rel) != digest]
    if changed:  # the plan's offsets are those of the files it read
        raise SystemExit(f"mutate.py: {', '.join(changed)} changed since the plan; plan again")
    install_runtime(src, orig)
    dropped: dict[int, str] = {}
    state_path = work / "build.json"
    if state_path.exists():
        dropped = {int(k): v for k, v in load(state_path)["did_not_compile"].items()}
    for round_no in range(1, args.rounds + 1):
        live = [m for m in mutants if m.id not in dropped]
        spans = write_mutants(src, orig, live)
        print(f"build round {round_no}: {len(live)} mutants", flush=True)
        if round_no == 1:
            cmd = ["bash", str(src / "ci/build.sh")]
        else:
            cmd = ["cmake", "--build", str(src / "build"), "-j", str(args.jobs), "--target", *targets]
            cmd += ["--", "-k", "0"]
        proc = subprocess.run(cmd, env=build_env(work, args.jobs, targets), capture_output=True, text=True, cwd=src)
        log = proc.stdout + proc.stderr
        (work / f"build-{round_no}.log").write_text(log)
        if proc.returncode == 0:
            break
        if round_no == 1:  # ninja stopped at the first failure: every failing unit's errors next
            continue
        guilty = blame(log, src, spans, {m.id for m in live})
        if not guilty:
            raise SystemExit(f"mutate.py: the build failed where no mutant is (log: {work}/build-{round_no}.log)")
        dropped.update(guilty)
        save(state_path, {"did_not_compile": {str(k): v for k, v in sorted(dropped.items())}})
        print(f"  {len(guilty)} mutants did not compile", flush=True)
    else:
        raise SystemExit(f"mutate.py: still failing after {args.rounds} rounds")
    save(state_path, {"did_not_compile": {str(k): v for k, v in sorted(dropped.items())}, "built": True})
    print(f"built: {len(mutants) - len(dropped)} mutants compiled, {len(dropped)} did not")


def gtest_entries(build: Path, exclude: str) -> list[dict]:
    """ctest's GoogleTest groups: name, binary, arguments, environment, working folder, timeout."""
    out = subprocess.run(
        ["ctest", "--test-dir", str(build), "--show-only=json-v1"], capture_output=True, text=True, check=True
    )
    entries = []
    for t in json.loads(out.stdout)["tests"]:
        cmd = t.get("command") or []
        if not cmd or not cmd[0].endswith(GTEST_RUNNER) or re.search(exclude, t["name"]):
            continue
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(kv.split("=", 1) for kv in props.get("ENVIRONMENT", []))
        entries.append(
            {
                "name": t["name"],
                "argv": cmd[1:],
                "env": env,
                "cwd": props.get("WORKING_DIRECTORY", str(build)),
                "timeout": float(props.get("TIMEOUT", 900)),
            }
        )
    return entries


def run_process(argv, env, cwd, timeout) -> tuple[int, float, bool, str]:
    """(exit status, seconds, timed out, output tail); the process group is killed on timeout."""
    start = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, process_group=0, text=True
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    return proc.returncode, time.monotonic() - start, timed_out, (out or "")[-3000:]


def parse_report(path: Path, binary: str) -> dict[str, dict]:
    """Per test of a GoogleTest XML report: seconds and "passed", "failed" or "skipped"."""
    tests = {}
    if not path.exists():
        return tests
    for case in ET.parse(path).getroot().iter("testcase"):
        label = f"{binary}:{case.get('classname')}.{case.get('name')}"
        status = "failed" if case.find("failure") is not None else "passed"
        if case.get("result") == "skipped" or case.find("skipped") is not None:
            status = "skipped"
        tests[label] = {"seconds": float(case.get("time", "0")), "status": status}
    return tests


def trace_entry(entry: dict, trace_dir: Path) -> dict:
    safe = re.sub(r"[^\w.-]+", "_", entry["name"])
    trace, report = trace_dir / f"{safe}.tsv", trace_dir / f"{safe}.xml"
    trace.unlink(missing_ok=True)
    env = dict(os.environ, **entry["env"], FSDPP_MUTANT_TRACE=str(trace), FSDPP_MUTANT="0")
    argv = entry["argv"] + [f"--gtest_output=xml:{report}"]
    rc, seconds, timed_out, tail = run_process(argv, env, entry["cwd"], entry["timeout"])
    binary = Path(entry["argv"][0]).name
    print(f"  {entry['name']}: exit {rc}, {seconds:.1f} s", flush=True)
    return {"entry": entry["name"], "binary": binary, "rc": rc, "seconds": seconds, "timed_out": timed_out,
            "tests": parse_report(report, binary), "trace": str(trace)}  # fmt: skip


def cmd_trace(args) -> None:
    work = Path(args.work)
    build = work / "src/build"
    trace_dir = work / "trace"
    trace_dir.mkdir(exist_ok=True)
    entries = gtest_entries(Path(args.ctest_dir) if args.ctest_dir else build, args.exclude)
    if args.suites:
        entries = [e for e in entries if Path(e["argv"][0]).name in args.suites.split(",")]
    if args.binaries:  # the suites linked elsewhere (MUTATION.md, "Linking against an unmutated build")
        for e in entries:
            e["argv"][0] = str(Path(args.binaries) / Path(e["argv"][0]).name)
            e["cwd"] = args.binaries
    print(f"trace: {len(entries)} GoogleTest groups", flush=True)
    start = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda e: trace_entry(e, trace_dir), entries))
    tests, reached = {}, {}
    for r, e in zip(results, entries, strict=True):
        for label, t in r["tests"].items():
            tests[label] = dict(t, entry=r["entry"], argv0=e["argv"][0], cwd=e["cwd"], env=e["env"])
        if Path(r["trace"]).exists():
            for line in Path(r["trace"]).read_text().splitlines():
                label, _, ident = line.rpartition("\t")
                reached.setdefault(ident, set()).add(label)
    coverage = {
        "seconds": time.monotonic() - start,
        "entries": [{k: r[k] for k in ("entry", "binary", "rc", "seconds", "timed_out")} for r in results],
        "tests": tests,
        "reached": {k: sorted(v) for k, v in sorted(reached.items(), key=lambda kv: int(kv[0]))},
    }
    save(work / "coverage.json", coverage)
    failing = [k for k, t in tests.items() if t["status"] == "failed"]
    print(f"trace: {len(tests)} tests, {len(reached)} mutants reached, {len(failing)} tests fail unmutated, "
          f"{coverage['seconds']:.0f} s")  # fmt: skip


def covering_runs(mutant_id: int, coverage: dict) -> list[dict]:
    """The runs that test one mutant: per binary, the tests that reached it and pass unmutated,
    cheapest binary first. Labels that are no test (a process outside any test) are ignored."""
    per_binary: dict[str, dict] = {}
    for label in coverage["reached"].get(str(mutant_id), []):
        test = coverage["tests"].get(label)
        if test is None or test["status"] != "passed":
            continue
        run = per_binary.setdefault(
            test["argv0"], {"argv0": test["argv0"], "cwd": test["cwd"], "tests": [], "seconds": 0.0}
        )
        run["tests"].append(label.split(":", 1)[1])
        run["seconds"] += test["seconds"]
    return sorted(per_binary.values(), key=lambda r: r["seconds"])


def recheck_fails(run: dict, failed: list[str], timeout: float, env: dict) -> bool:
    """Whether what failed under the mutant fails with no mutant on as well (a loaded machine's
    timeouts): the first failed test, or every test of the run when none was named."""
    tests = [failed[0].split(":", 1)[1]] if failed else run["tests"]
    argv = [run["argv0"], "--gtest_filter=" + ":".join(tests)]
    rc, _, timed_out, _ = run_process(argv, dict(env, FSDPP_MUTANT="0"), run["cwd"], timeout)
    return timed_out or rc != 0


def run_mutant(mutant: dict, coverage: dict, work: Path, args) -> dict:
    runs = covering_runs(mutant["id"], coverage)
    result = {"id": mutant["id"], "tests_covering": sum(len(r["tests"]) for r in runs), "runs": []}
    if not runs:
        return dict(result, status="not_covered", seconds=0.0)
    start = time.monotonic()
    result["status"] = "survived"
    for run in runs:
        timeout = args.timeout_base + args.timeout_factor * run["seconds"]
        report = work / "runs" / f"{mutant['id']}-{Path(run['argv0']).name}.xml"
        argv = [run["argv0"], "--gtest_filter=" + ":".join(run["tests"]), "--gtest_fail_fast",
                f"--gtest_output=xml:{report}"]  # fmt: skip
        env = dict(os.environ, FSDPP_MUTANT=str(mutant["id"]))
        env.pop("FSDPP_MUTANT_TRACE", None)
        rc, seconds, timed_out, tail = run_process(argv, env, run["cwd"], timeout)
        failed = [k for k, t in parse_report(report, Path(run["argv0"]).name).items() if t["status"] == "failed"]
        record = {"binary": Path(run["argv0"]).name, "tests": len(run["tests"]), "rc": rc, "seconds": round(seconds, 2),
                  "timeout_s": round(timeout, 1), "timed_out": timed_out, "failed_tests": failed[:5]}  # fmt: skip
        result["runs"].append(record)
        if timed_out or rc != 0:
            result["status"] = "killed"
            result["killed_by"] = "timeout" if timed_out else (failed[0] if failed else f"exit {rc}")
            if not failed and not timed_out:
                record["output_tail"] = tail[-600:]
            if recheck_fails(run, failed, timeout, env):  # fails unmutated too: the machine, not the mutant
                result["status"] = "inconclusive"
            break
    return dict(result, seconds=round(time.monotonic() - start, 2))


def cmd_run(args) -> None:
    work = Path(args.work)
    (work / "runs").mkdir(exist_ok=True)
    plan, coverage = load(work / "plan.json"), load(work / "coverage.json")
    dropped = load(work / "build.json")["did_not_compile"]
    results_path = work / "results.jsonl"
    done = set()
    if results_path.exists():
        done = {json.loads(line)["id"] for line in results_path.read_text().splitlines() if line.strip()}
    todo = [m for m in plan["mutants"] if str(m["id"]) not in dropped and m["id"] not in done]
    if args.only:
        wanted = {int(x) for x in args.only.split(",")}
        todo = [m for m in todo if m["id"] in wanted]
    print(f"run: {len(todo)} mutants to run ({len(done)} done before)", flush=True)
    start = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool, results_path.open("a") as out:
        for r in pool.map(lambda m: run_mutant(m, coverage, work, args), todo):
            out.write(json.dumps(r) + "\n")
            out.flush()
            m = plan["mutants"][r["id"] - 1]
            print(f"  #{r['id']} {m['key']} {m['operator']}: {r['status']} ({r['seconds']:.0f} s, "
                  f"{r['tests_covering']} tests)", flush=True)  # fmt: skip
    print(f"run: {time.monotonic() - start:.0f} s")


def load_kills(path: Path) -> list[dict]:
    """ci/mutation/kills.json's `kills`: the tests added to kill survivors, each mutant by its
    campaign key."""
    if not path.exists():
        return []
    doc = load(path)
    if doc.get("version") != DOC_VERSION:
        raise SystemExit(f"mutate.py: {path}: version {doc.get('version')!r}, expected {DOC_VERSION}")
    for e in doc["kills"]:
        if not e.get("tests") or any(":" not in t for t in e["tests"]):
            raise SystemExit(f"mutate.py: {path}: {e.get('key')}: 'tests' must list 'binary:Suite.Name' entries")
    return doc["kills"]


def not_killed(path: Path) -> dict[str, str]:
    """kills.json's `not_killed`: survivors left without a test, each with why (not equivalent)."""
    return {e["key"]: e["reason"] for e in load(path).get("not_killed", [])} if path.exists() else {}


def cmd_confirm(args) -> None:
    """Each test of kills.json against its mutant, in a build of this tree (where the test lives):
    the mutant is carried from the campaign's commit to this tree's file (sites.relocate), written
    in as a schema, and the tests must fail with it on and pass with it off."""
    work = Path(args.work)
    plan = load(work / "plan.json")
    by_key = {m["key"]: m for m in plan["mutants"]}
    kills = load_kills(Path(args.kills))
    unknown = [e["key"] for e in kills if e["key"] not in by_key]
    if unknown:
        raise SystemExit(f"mutate.py: {args.kills}: not mutants of this campaign: {', '.join(unknown)}")
    mutants = []
    for e in kills:
        m = record_mutant(by_key[e["key"]])
        old = subprocess.run(["git", "-C", str(REPO), "show", f"{plan['commit']}:{m.file}"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        try:
            mutants.append(sites.relocate(m, old, (REPO / m.file).read_text()))
        except ValueError as err:
            raise SystemExit(f"mutate.py: {args.kills}: {err}") from None
    root = work / "confirm"
    src = root / "src"
    copy_tree(REPO, src, refresh=True)
    orig = snapshot(root, refresh=True)
    install_runtime(src, orig)
    write_mutants(src, orig, mutants)
    binaries = sorted({t.split(":", 1)[0] for e in kills for t in e["tests"]})
    env = dict(build_env(root, args.jobs, binaries), CCACHE_BASEDIR=str(src))
    print(f"confirm: building {' '.join(binaries)} with {len(mutants)} mutants", flush=True)
    proc = subprocess.run(["bash", str(src / "ci/build.sh")], env=env, capture_output=True, text=True, cwd=src)
    (root / "build.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"mutate.py: the confirm build failed (log: {root}/build.log)")
    entries = {Path(e["argv"][0]).name: e for e in gtest_entries(src / "build", r"^$")}
    commit = git_commit(REPO)
    records = []
    for e, m in zip(kills, mutants, strict=True):
        record = {"key": e["key"], "id": m.id, "now": m.key, "commit": commit, "tests": e["tests"], "runs": []}
        by_binary: dict[str, list[str]] = {}
        for t in e["tests"]:
            binary, name = t.split(":", 1)
            by_binary.setdefault(binary, []).append(name)
        failed_on, passed_off = False, True
        for binary, names in sorted(by_binary.items()):
            entry = entries[binary]
            argv = [entry["argv"][0], "--gtest_filter=" + ":".join(names)]
            for switch in (str(m.id), "0"):
                report = root / f"{m.id}-{binary}-{switch}.xml"
                run_env = dict(os.environ, **entry["env"], FSDPP_MUTANT=switch)
                for shard in ("GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX"):  # a sharded entry's: all named tests run
                    run_env.pop(shard, None)
                rc, seconds, timed_out, _ = run_process(argv + [f"--gtest_output=xml:{report}"], run_env,
                                                        entry["cwd"], entry["timeout"])  # fmt: skip
                tests = parse_report(report, binary)
                record["runs"].append({
                    "binary": binary, "mutant": switch != "0", "rc": rc, "seconds": round(seconds, 2),
                    "timed_out": timed_out, "ran": len(tests),
                    "failed_tests": sorted(k for k, t in tests.items() if t["status"] == "failed"),
                })  # fmt: skip
                if switch != "0":
                    failed_on = failed_on or rc != 0 or timed_out
                else:
                    passed_off = passed_off and rc == 0 and len(tests) == len(names)
        record["confirmed"] = failed_on and passed_off
        records.append(record)
        print(f"  #{m.id} {e['key']} (now {m.key}): {'killed' if record['confirmed'] else 'NOT confirmed'}",
              flush=True)  # fmt: skip
    save(work / "kills.json", {"version": DOC_VERSION, "commit": commit, "kills": records})
    failed = [r["key"] for r in records if not r["confirmed"]]
    if failed:
        raise SystemExit(f"mutate.py: not confirmed: {', '.join(failed)}")


STATUSES = ["killed", "survived", "inconclusive", "equivalent", "not_covered", "did_not_compile"]
MISSED = ("survived", "not_covered", "inconclusive")  # what the tests did not catch


def judgements(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    doc = load(path)
    if doc.get("version") != DOC_VERSION:
        raise SystemExit(f"mutate.py: {path}: version {doc.get('version')!r}, expected {DOC_VERSION}")
    return {e["key"]: e["reason"] for e in doc["equivalent"]}


def mutant_status(m: dict, results: dict, dropped: dict, equivalent: dict) -> dict:
    entry = {k: m[k] for k in ("id", "key", "dir", "file", "line", "operator", "original", "replacement", "text")}
    if str(m["id"]) in dropped:
        return dict(entry, status="did_not_compile", error=dropped[str(m["id"])])
    r = results.get(m["id"])
    if r is None:
        return dict(entry, status="not_run")
    entry.update({k: r[k] for k in ("tests_covering", "seconds", "runs") if k in r})
    if r["status"] == "killed":
        if m["key"] in equivalent:
            raise SystemExit(f"mutate.py: {m['key']} is judged equivalent but a test killed it")
        return dict(entry, status="killed", killed_by=r["killed_by"])
    if m["key"] in equivalent:
        return dict(entry, status="equivalent", reason=equivalent[m["key"]], observed=r["status"])
    return dict(entry, status=r["status"])


def figures(mutants: list[dict]) -> dict:
    counts = {s: sum(1 for m in mutants if m["status"] == s) for s in STATUSES + ["not_run"]}
    counts["sampled"] = len(mutants)
    scored = counts["killed"] + counts["survived"] + counts["inconclusive"] + counts["not_covered"]
    covered = counts["killed"] + counts["survived"] + counts["inconclusive"]
    counts["kill_rate"] = round(counts["killed"] / scored, 4) if scored else None
    counts["covered_kill_rate"] = round(counts["killed"] / covered, 4) if covered else None
    return counts


def cmd_report(args) -> None:
    work = Path(args.work)
    plan, coverage = load(work / "plan.json"), load(work / "coverage.json")
    dropped = load(work / "build.json")["did_not_compile"]
    results = {}
    for line in (work / "results.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            results[r["id"]] = r
    equivalent = judgements(Path(args.equivalent))
    mutants = [mutant_status(m, results, dropped, equivalent) for m in plan["mutants"]]
    # confirm's outcomes (WORK/kills.json), for exactly the tests kills.json names now: an entry
    # added or changed since the last confirm is not counted, it is an error.
    wanted = {e["key"]: e["tests"] for e in load_kills(Path(args.kills))}
    outcomes = load(work / "kills.json")["kills"] if (work / "kills.json").exists() else []
    changed = {k["key"] for k in outcomes if k["tests"] != wanted.get(k["key"])}
    stale = sorted((set(wanted) ^ {k["key"] for k in outcomes}) | changed)
    if stale:
        raise SystemExit(f"mutate.py: {args.kills} and the last confirm differ at {', '.join(stale)}: run confirm")
    by_key = {m["key"]: m for m in mutants}
    for k in outcomes:
        m = by_key[k["key"]]
        if m["status"] not in MISSED:
            raise SystemExit(f"mutate.py: {k['key']} has a test added to kill it but is {m['status']}")
        m["added_test"] = {f: k[f] for f in ("tests", "commit", "now", "confirmed", "runs")}
    for key, reason in not_killed(Path(args.kills)).items():
        m = by_key[key]
        if m["status"] not in MISSED or "added_test" in m:
            raise SystemExit(f"mutate.py: {key} is listed as not killed but is {m['status']} or has a test")
        m["why_not_killed"] = reason
    later = [dict(m, status="killed") if m.get("added_test", {}).get("confirmed") else m for m in mutants]
    doc = {
        "version": DOC_VERSION,
        "kind": "fsdpp-mutation-score",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": plan["commit"],
        "machine": args.machine,
        "settings": {
            "seed": plan["seed"],
            "per_dir": plan["per_dir"],
            "dirs": sorted({m["dir"] for m in plan["mutants"]}),
            "tests": "every GoogleTest group of ctest (run_gtest_group.sh entries), each mutant against the tests "
            "that reached it unmutated and pass unmutated",
            "excluded_ctest": "every entry that is not a GoogleTest group (references.*, peers.*, bench*, lint.*, "
            "docs.*, fuzz.*, examples.*, launch.*, ci.*, reliability.*)",
            "timeout": f"{args.timeout_base} s + {args.timeout_factor} x the tests' unmutated seconds, per binary",
            "werror": "ON except fsdpp_core (a mutant that only warns is run)",
        },
        "population": plan["population"],
        "population_by_operator": plan["population_by_operator"],
        "trace": {
            "seconds": round(coverage["seconds"], 1),
            "tests": len(coverage["tests"]),
            "failing_unmutated": sorted(k for k, t in coverage["tests"].items() if t["status"] == "failed"),
        },
        "run_seconds": round(sum(r.get("seconds", 0) for r in results.values()), 1),
        "figures": {d: figures([m for m in mutants if m["dir"] == d]) for d in sorted({m["dir"] for m in mutants})},
        "figures_with_added_tests": {
            d: figures([m for m in later if m["dir"] == d]) for d in sorted({m["dir"] for m in later})
        },
        "notes": args.note,
        "mutants": mutants,
    }
    doc["figures"]["all"] = figures(mutants)
    doc["figures_with_added_tests"]["all"] = figures(later)
    doc["figures_by_operator"] = {
        op: figures([m for m in mutants if m["operator"] == op]) for op in sorted({m["operator"] for m in mutants})
    }
    # Issue 42's rule: each surviving non-equivalent mutant has a killing test or a reason.
    doc["unjudged"] = [m["key"] for m in later if m["status"] in MISSED and "why_not_killed" not in m]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save(out, doc)
    print(table(doc["figures"]))
    print(table(doc["figures_by_operator"]))
    print("with the tests added for survivors (confirmed):")
    print(table(doc["figures_with_added_tests"]))
    print(f"survivors with neither a confirmed test nor a reason: {len(doc['unjudged'])}")
    print(f"report: {out}")


def table(figs: dict) -> str:
    cols = ["sampled", "killed", "survived", "inconclusive", "equivalent", "not_covered", "did_not_compile", "not_run"]
    lines = ["dir         " + " ".join(f"{c[:11]:>11}" for c in cols) + "   kill rate (covered)"]
    for d, f in figs.items():
        rate = "-" if f["kill_rate"] is None else f"{100 * f['kill_rate']:.0f}%"
        cov = "-" if f["covered_kill_rate"] is None else f"{100 * f['covered_kill_rate']:.0f}%"
        lines.append(f"{d:<12}" + " ".join(f"{f[c]:>11}" for c in cols) + f"   {rate} ({cov})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("plan", "build", "trace", "run", "confirm", "report"):
        p = sub.add_parser(name)
        p.add_argument("--work", default="/tmp/fsdpp-mutants")
        p.add_argument("-j", "--jobs", type=int, default=1)
        p.add_argument("--timeout-base", type=float, default=60.0)
        p.add_argument("--timeout-factor", type=float, default=4.0)
    sub.choices["plan"].add_argument("--per-dir", type=int, default=6)
    sub.choices["plan"].add_argument("--seed", type=int, default=1)
    sub.choices["plan"].add_argument("--dirs", nargs="+", default=DIRS)
    sub.choices["build"].add_argument("--rounds", type=int, default=6)
    sub.choices["build"].add_argument(
        "--targets", default="", help="only these targets (default: every suite and fsdpp)"
    )
    sub.choices["trace"].add_argument("--exclude", default=r"^$", help="regex of ctest names to leave out")
    sub.choices["trace"].add_argument("--ctest-dir", default="", help="the build whose ctest lists the groups")
    sub.choices["trace"].add_argument("--suites", default="", help="comma-separated suite binaries (default: all)")
    sub.choices["trace"].add_argument("--binaries", default="", help="run the suite binaries of this folder")
    sub.choices["run"].add_argument("--only", default="", help="comma-separated mutant ids")
    sub.choices["confirm"].add_argument("--kills", default=str(HERE / "kills.json"))
    sub.choices["report"].add_argument("--out", required=True)
    sub.choices["report"].add_argument("--equivalent", default=str(HERE / "equivalent.json"))
    sub.choices["report"].add_argument("--kills", default=str(HERE / "kills.json"))
    sub.choices["report"].add_argument("--machine", default=os.uname().nodename)
    sub.choices["report"].add_argument("--note", action="append", default=[], help="a line for the document's notes")
    args = parser.parse_args()
    {
        "plan": cmd_plan,
        "build": cmd_build,
        "trace": cmd_trace,
        "run": cmd_run,
        "confirm": cmd_confirm,
        "report": cmd_report,
    }[args.command](args)


if __name__ == "__main__":
    main()
