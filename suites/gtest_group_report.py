#!/usr/bin/env python3
"""Reads one GoogleTest XML report (--gtest_output=xml) of a ctest group
(suites/run_gtest_group.sh) and says what ran: one line of counts, one line per skipped
test with the reason GTEST_SKIP() gave, and, when FSDPP_TEST_SUMMARY names a file, one JSON
line appended to it for ci/test_summary.py.

    gtest_group_report.py REPORT.xml LABEL

Exit 3 when a test skipped without a reason (a skip must say why), else 0: the group's own
exit status stays the runner's.
"""

import json
import os
import sys
import xml.etree.ElementTree as ET

PREFIX = "fsdpp-gtest-group:"


def skip_reason(message):
    # GoogleTest's message is "<file>:<line>\n<the streamed reason>" (or "...: Skipped\n...").
    lines = [line.strip() for line in (message or "").splitlines()]
    body = [line for line in lines[1:] if line and line != "Skipped"]
    return " ".join(body)


def main():
    report, label = sys.argv[1], sys.argv[2]
    root = ET.parse(report).getroot()
    passed, failed, skipped = 0, 0, []
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        if case.find("failure") is not None:
            failed += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            node = case.find("skipped")
            skipped.append((name, skip_reason(node.get("message") if node is not None else "")))
        elif case.get("status", "run") == "run":
            passed += 1
    print(f"{PREFIX} {passed} passed, {failed} failed, {len(skipped)} skipped ({label})")
    for name, reason in skipped:
        print(f"{PREFIX} skipped {name}: {reason or '(NO REASON GIVEN)'}")
    summary = os.environ.get("FSDPP_TEST_SUMMARY")
    if summary:
        record = {
            "entry": os.environ.get("FSDPP_CTEST_NAME", ""),
            "group": label,
            "passed": passed,
            "failed": failed,
            "skipped": [{"test": n, "reason": r} for n, r in skipped],
        }
        with open(summary, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    unexplained = [name for name, reason in skipped if not reason]
    if unexplained:
        print(f'{PREFIX} a test must say why it skips (GTEST_SKIP() << "why"): {", ".join(unexplained)}')
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
