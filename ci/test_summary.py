#!/usr/bin/env python3
"""What a ctest run ran, counted by test rather than by ctest entry: each entry's tests
passed, failed and skipped, every skip with its reason, and the totals on the last line.

    ci/test_summary.py CTEST_JUNIT.xml GROUPS.jsonl

A GoogleTest group entry (suites/run_gtest_group.sh) counts its tests from the record that
suites/gtest_group_report.py appended to GROUPS.jsonl; any other entry (a script, a
discovered GoogleTest case) is one test with ctest's status, its skip reason read from its
output (GoogleTest's "Skipped" message) or ctest's. Exit 0; ctest's status is the run's.
"""

import json
import sys
import xml.etree.ElementTree as ET


def gtest_skip_reason(output):
    lines = (output or "").splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1].strip():
            return lines[i + 1].strip()
    return ""


def main():
    junit, groups_file = sys.argv[1], sys.argv[2]
    groups = {}
    try:
        with open(groups_file, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                # Two binaries may both have a suite of one name (two entries, one name):
                # each entry of that name takes the next record, so the totals hold.
                groups.setdefault(record["entry"], []).append(record)
    except FileNotFoundError:
        pass
    rows, totals = [], {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        status = case.get("status", "run")
        failed = case.find("failure") is not None or status == "fail"
        records = groups.get(name) or []
        record = records.pop(0) if records else None
        if record is not None:
            name = f"{name} ({record['group']})"
        if record is not None and not failed:
            passed, nfailed, skips = record["passed"], record["failed"], record["skipped"]
        elif status in ("notrun", "disabled") or case.find("skipped") is not None:
            out = case.findtext("system-out") or ""
            node = case.find("skipped")
            reason = gtest_skip_reason(out) or (node.get("message") if node is not None else "") or "(no reason)"
            passed, nfailed, skips = 0, 0, [{"test": name, "reason": reason}]
        else:
            passed, nfailed, skips = (0, 1, []) if failed else (1, 0, [])
        totals["passed"] += passed
        totals["failed"] += nfailed
        totals["skipped"] += len(skips)
        rows.append((name, passed, nfailed, skips))
    print("== tests per ctest entry (passed / failed / skipped)")
    for name, passed, nfailed, skips in rows:
        print(f"  {name}: {passed} / {nfailed} / {len(skips)}")
    if totals["skipped"]:
        print("== skipped, and why")
        for name, _, _, skips in rows:
            for s in skips:
                print(f"  {s['test']} ({name}): {s['reason']}")
    print(f"{len(rows)} ctest entries, counted by test:")
    print(f"tests: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
