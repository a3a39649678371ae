#!/usr/bin/env python3
"""Turns the GPU runner's ctest JUnit files into one committed record (format
"fsdpp.gpu-suite" version 1, results/README.md): every test with its status and seconds,
the counts, the commit tested, the GPU, and each failure's first assertion lines.

    ci/gpu_suite_summary.py --commit SHA --gpu NAME --driver V [--note TEXT]... OUT.json JUNIT.xml...
"""
import argparse
import json
import os
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
            detail = [line[:240] for line in text.splitlines()
                      if "Failure" in line or "Which is" in line or ": Skipped" in line][:6]
            yield {"name": case.get("name"), "status": status, "seconds": float(case.get("time", 0)),
                   "detail": detail}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--commit", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--driver", required=True)
    p.add_argument("--libtorch", default="2.11.0+cu130")
    p.add_argument("--note", action="append", default=[])
    p.add_argument("out")
    p.add_argument("junit", nargs="+")
    a = p.parse_args()
    tests = []
    for path in a.junit:
        tests.extend(cases(path))
    names = [t["name"] for t in tests]
    if len(names) != len(set(names)):
        sys.exit("gpu_suite_summary: a test appears in two JUnit files")
    counts = {s: sum(t["status"] == s for t in tests) for s in ("passed", "failed", "skipped")}
    doc = {"format": "fsdpp.gpu-suite", "version": 1, "commit": a.commit, "gpu": a.gpu, "driver": a.driver,
           "libtorch": a.libtorch, "tests": len(tests), "counts": counts, "notes": a.note,
           "results": sorted(tests, key=lambda t: t["name"])}
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
