#!/usr/bin/env python3
"""Turns the GPU runner's ctest JUnit files into one committed record (format
"fsdpp.gpu-suite" version 1, results/README.md): every test with its status and seconds,
the counts, the commit tested, the GPU, and each failure's first assertion lines.

    ci/gpu_suite_summary.py --commit SHA --gpu NAME --driver V [--note TEXT]... OUT.json RESULT...

A RESULT ending in .xml is ctest's JUnit (--output-junit); any other file is ctest's console
output (with --output-on-failure), which is all there is when the run was cut off before
ctest wrote its JUnit: a test started there without a result line is "unfinished".
"""

import argparse
import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET


def cases(path):
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    for suite in suites:
        for case in suite.iter("testcase"):
            status = case.get("status", "run")
            failure = case.find("failure")
            skipped = case.find("skipped")
            if failure is not None:
                status = "failed"
            elif skipped is not None or status in ("notrun", "disabled"):
                status = "skipped"
            else:
                status = "passed"
            out = case.find("system-out")
            text = out.text if out is not None and out.text else ""
            detail = [
                line[:240]
                for line in text.splitlines()
                if "Failure" in line or "Which is" in line or ": Skipped" in line
            ][:6]
            yield {"name": case.get("name"), "status": status, "seconds": float(case.get("time", 0)), "detail": detail}


RESULT_LINE = re.compile(r"^\s*\d+/\d+ Test +#\d+: (\S+) \.*\s*(\*\*\*)?([A-Za-z][A-Za-z ]*?)\s+([0-9.]+) sec")
START_LINE = re.compile(r"^\s*Start +\d+: (\S+)\s*$")


def console_cases(path):
    """Tests from ctest's console output: its result lines, and the assertion lines that
    --output-on-failure printed under a failure; started tests without one: unfinished."""
    started, finished, current = [], {}, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = START_LINE.match(line)
            if m:
                started.append(m.group(1))
                continue
            m = RESULT_LINE.match(line)
            if m:
                word = m.group(3).strip()
                status = {"Passed": "passed", "Skipped": "skipped", "Not Run": "skipped"}.get(word, "failed")
                current = {
                    "name": m.group(1),
                    "status": status,
                    "seconds": float(m.group(4)),
                    "detail": [] if status != "failed" or word == "Failed" else [word],
                }
                finished[current["name"]] = current
                continue
            if (
                current is not None
                and current["status"] == "failed"
                and len(current["detail"]) < 6
                and ("Failure" in line or "Which is" in line or "Expected" in line or "Actual" in line)
            ):
                current["detail"].append(line[:240])
    out = list(finished.values())
    for name in started:
        if name not in finished:
            out.append(
                {
                    "name": name,
                    "status": "unfinished",
                    "seconds": None,
                    "detail": ["started, no result: the run was stopped before it ended"],
                }
            )
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--commit", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--driver", required=True)
    p.add_argument("--libtorch", default="2.11.0+cu130")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("out")
    p.add_argument("results", nargs="+")
    a = p.parse_args()
    tests, seen = [], set()
    for path in a.results:
        found = list(cases(path) if path.endswith(".xml") else console_cases(path))
        # One run's file may name two entries alike (two executables' GoogleTest groups
        # with the same suite name, e.g. `Resharding.*`); two files must not share one.
        names = {t["name"] for t in found}
        if names & seen:
            sys.exit("gpu_suite_summary: %s appears in two result files" % sorted(names & seen)[0])
        seen |= names
        tests.extend(found)
    statuses = ("passed", "failed", "skipped", "unfinished")
    counts = {
        s: sum(t["status"] == s for t in tests)
        for s in statuses
        if s != "unfinished" or any(t["status"] == s for t in tests)
    }
    doc = {
        "format": "fsdpp.gpu-suite",
        "version": 1,
        "commit": a.commit,
        "gpu": a.gpu,
        "driver": a.driver,
        "libtorch": a.libtorch,
        "tests": len(tests),
        "counts": counts,
        "notes": a.note,
        "results": sorted(tests, key=lambda t: t["name"]),
    }
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(a.out)))
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, a.out)
    print(f"{a.out}: {len(tests)} tests, {counts}")


if __name__ == "__main__":
    main()
