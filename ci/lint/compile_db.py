#!/usr/bin/env python3
"""Writes a compile database with one entry per source file, for clang-tidy.

fsdpp is a unity build (CMakeLists.txt: FSDPP_UNITY_BUILD), so the build's
compile_commands.json names generated unity_<n>_cxx.cxx files, each of which #includes a
few of a target's sources, as does the fuzz driver's generated fuzz_brief_all.cpp. Every
source of one such file is compiled with that file's command, so each gets an entry with the
same command, its own path in place of the file's, and the same working directory. Entries
for sources outside any batch are kept as they are; CMake's precompiled-header stub
(cmake_pch.hxx.cxx) is dropped.

The build precompiles its shared header with GCC (`-include .../cmake_pch.hxx`, beside a
.gch that clang cannot read): each entry includes the header that stub names instead, which
is the same text.

    compile_db.py BUILD_DIR OUT_DIR     reads BUILD_DIR/compile_commands.json,
                                        writes OUT_DIR/compile_commands.json
"""

import json
import re
import shlex
import sys
from pathlib import Path

UNITY_INCLUDE = re.compile(r'^#include "(?P<path>[^"]+)"', re.MULTILINE)


def sources_of_unity(unity_file: Path) -> list[str]:
    """The sources a CMake unity file includes, in order."""
    return UNITY_INCLUDE.findall(unity_file.read_text())


def without_gcc_pch(args: list[str]) -> list[str]:
    """`args` with each `-include <stub>/cmake_pch.hxx` replaced by the headers the stub includes."""
    out = []
    i = 0
    while i < len(args):
        if args[i] == "-include" and i + 1 < len(args) and args[i + 1].endswith("cmake_pch.hxx"):
            for header in UNITY_INCLUDE.findall(Path(args[i + 1]).read_text()):
                out += ["-include", header]
            i += 2
            continue
        if args[i] != "-Winvalid-pch":
            out.append(args[i])
        i += 1
    return out


def arguments_of(entry: dict) -> list[str]:
    return list(entry["arguments"]) if "arguments" in entry else shlex.split(entry["command"])


def entry_for(entry: dict, unity_file: str, source: str) -> dict:
    """`entry` (the unity file's) rewritten to compile `source` alone."""
    args = [source if a == unity_file else a for a in arguments_of(entry)]
    return {"directory": entry["directory"], "arguments": without_gcc_pch(args), "file": source}


def is_batch(path: Path) -> bool:
    """A CMake unity file, or a generated file of the build that includes sources the same way
    (suites/CMakeLists.txt's fuzz_brief_all.cpp)."""
    if path.parent.name == "Unity" and path.name.startswith("unity_"):
        return True
    return path.suffix == ".cpp" and path.is_file() and path.read_text().startswith("// GENERATED")


def derive(entries: list[dict]) -> list[dict]:
    out = []
    for entry in entries:
        path = Path(entry["file"])
        if path.name.endswith("cmake_pch.hxx.cxx"):
            continue
        if is_batch(path):
            out.extend(entry_for(entry, entry["file"], s) for s in sources_of_unity(path))
        else:
            out.append(entry_for(entry, entry["file"], entry["file"]))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: compile_db.py BUILD_DIR OUT_DIR", file=sys.stderr)
        return 2
    source_db = Path(argv[1]) / "compile_commands.json"
    if not source_db.is_file():
        print(
            f"ci/lint/compile_db.py: {source_db}: no such file (expected the build's compile database: "
            "run bash ci/build.sh, whose presets export it)",
            file=sys.stderr,
        )
        return 1
    try:
        entries = json.loads(source_db.read_text())
    except json.JSONDecodeError as e:
        print(f"ci/lint/compile_db.py: {source_db}: not JSON ({e})", file=sys.stderr)
        return 1
    out_dir = Path(argv[2])
    out_dir.mkdir(parents=True, exist_ok=True)
    derived = derive(entries)
    (out_dir / "compile_commands.json").write_text(json.dumps(derived, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
