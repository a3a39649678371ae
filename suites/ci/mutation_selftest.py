#!/usr/bin/env python3
"""ci/mutation's self-test on a small C++ fixture (suites/ci/mutation/): the sites it finds and
the ones it must not, that the schemata compile and change nothing with no mutant on, that the
compiler error of a mutant that cannot compile is traced to that mutant, that each mutant on
changes what the program prints (but the three equivalent ones), a condition of a type that
converts to bool only explicitly (std::optional) among them, and that the trace records the
sites reached under the process's label and no others. ctest: ci.mutation_selftest.

  python3 suites/ci/mutation_selftest.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci/mutation"))
import mutate  # noqa: E402
import sites  # noqa: E402

FIXTURE = REPO / "suites/ci/mutation/fixture.cpp"
MAIN = REPO / "suites/ci/mutation/main.cpp"
SWITCH = REPO / "ci/mutation/runtime/mutant_switch.cpp"

# (line, operator, replacement) of every mutant the fixture must give, and no other.
EXPECTED = [
    (12, "ror", "<="), (12, "constant", "1"), (12, "constant", "1"), (13, "ror", ">"), (13, "aor", "+"),
    (13, "constant", "0"), (19, "ror", "<="), (19, "delete", ""), (23, "aor", "+"), (25, "swap", "b, a"),
    (29, "negate", "!(loud)"), (29, "delete", ""), (33, "lcr", "||"), (37, "ror", ">="), (37, "ror", "<="),
    (37, "lcr", "||"), (37, "constant", "1"), (38, "aor", "+"), (38, "delete", ""), (39, "delete", ""),
    (44, "aor", "-"), (46, "swap", "size, name"), (48, "aor", "/"), (51, "negate", "!(v)"), (52, "constant", "0"),
]  # fmt: skip
# Mutants main.cpp's inputs cannot tell apart from the original: i <= 0 and i < 1 where i == 0
# returns 0 either way; steps <= 100 where steps never reaches 100.
EQUIVALENT = {(12, "ror", "i <= 0"), (12, "constant", "i < 1"), (37, "ror", "n > 0 && steps <= 100")}
NOT_COMPILING = (46, "swap")  # mismatched(size, name): an int where a std::string is wanted
NEVER_REACHED = (48, "aor", "x / 3")


def fail(message: str) -> None:
    print(f"mutation_selftest: FAIL: {message}")
    sys.exit(1)


def compile_program(workdir: Path, fixture_text: str, name: str) -> tuple[int, str]:
    (workdir / "fixture.cpp").write_text(fixture_text)
    cmd = ["g++", "-std=c++17", "-O1", "-o", str(workdir / name), str(workdir / "fixture.cpp"), str(MAIN), str(SWITCH)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr


def run(binary: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith("FSDPP_MUTANT")}
    proc = subprocess.run([str(binary)], env=dict(full, **env), capture_output=True, text=True, timeout=20)
    return f"{proc.returncode}\n{proc.stdout}"


def check_sites(mutants: list[sites.Mutant]) -> None:
    found = sorted((m.line, m.operator, m.replacement) for m in mutants)
    if found != sorted(EXPECTED):
        fail(f"sites: expected {sorted(EXPECTED)}, found {found}")
    for m in mutants:
        if m.line in (18, 28, 30, 41) and m.operator != "delete":
            fail(f"a site on a declaration, a string or a macro: {m.key}")


def check_relocate(text: str, mutants: list[sites.Mutant]) -> None:
    """Every mutant carried to a version with a line added above it is the same site a line
    lower; one whose line was edited is refused, not matched to a guess."""
    later = "// a line added at the top\n" + text
    for m in mutants:
        moved = sites.relocate(m, text, later)
        if (moved.line, moved.column, moved.text, moved.id) != (m.line + 1, m.column, m.text, m.id):
            fail(f"relocate: {m.key} became {moved.key} ({moved.text!r})")
    m = mutants[0]
    lines = text.splitlines()
    lines[m.line - 1] += " + 0"
    try:
        sites.relocate(m, text, "\n".join(lines) + "\n")
    except ValueError:
        return
    fail(f"relocate: {m.key}'s line was edited, yet it was matched")


def main() -> None:
    text = FIXTURE.read_text()
    mutants = sites.find_mutants("fixture.cpp", text)
    for i, m in enumerate(mutants, 1):
        m.id = i
    check_sites(mutants)
    check_relocate(text, mutants)
    by = {m.id: m for m in mutants}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rc, log = compile_program(workdir, text, "original")
        if rc != 0:
            fail(f"the fixture does not compile:\n{log}")
        expected_output = run(workdir / "original")

        schemata, spans = sites.apply_schemata(text, mutants)
        rc, log = compile_program(workdir, schemata, "mutated")
        guilty = mutate.blame(log, workdir, {"fixture.cpp": spans}, set(by))
        if rc == 0 or {(by[i].line, by[i].operator) for i in guilty} != {NOT_COMPILING}:
            fail(f"the compiler's error should blame the one mutant {NOT_COMPILING}; blamed {sorted(guilty)}:\n{log}")
        live = [m for m in mutants if m.id not in guilty]
        schemata, spans = sites.apply_schemata(text, live)
        rc, log = compile_program(workdir, schemata, "mutated")
        if rc != 0:
            fail(f"the schemata do not compile:\n{log}")
        if run(workdir / "mutated") != expected_output:
            fail("with no mutant on, the mutated program prints something else")

        survivors = set()
        for m in live:
            if run(workdir / "mutated", FSDPP_MUTANT=str(m.id)) == expected_output:
                survivors.add(m.id)
        named = {(by[i].line, by[i].operator, by[i].text) for i in survivors}
        if named != EQUIVALENT | {NEVER_REACHED}:
            fail(f"survivors should be the equivalent mutants and the unreached one; got {sorted(named)}")

        trace = workdir / "trace.tsv"
        run(workdir / "mutated", FSDPP_MUTANT_TRACE=str(trace), FSDPP_MUTANT_LABEL="fixture:Main.Run")
        lines = trace.read_text().splitlines()
        labels = {line.split("\t")[0] for line in lines}
        reached = {int(line.split("\t")[1]) for line in lines}
        unreached = {m.id for m in live if (m.line, m.operator, m.text) == NEVER_REACHED}
        if labels != {"fixture:Main.Run"} or reached != {m.id for m in live} - unreached or len(lines) != len(reached):
            fail(f"trace: labels {labels}, reached {sorted(reached)}, {len(lines)} lines")
    print(
        f"mutation_selftest: {len(mutants)} mutants of the fixture: sites, schemata, blame, kills and trace as expected"
    )


if __name__ == "__main__":
    main()
