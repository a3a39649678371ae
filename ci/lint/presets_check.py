#!/usr/bin/env python3
"""Checks that every configure preset in CMakePresets.json exports compile_commands.json
(CMAKE_EXPORT_COMPILE_COMMANDS ON, set on the preset or inherited), which ci/lint/tidy.sh
reads. Exit 0 when every one does; 1 naming each that does not.

    presets_check.py [CMakePresets.json]
"""

import json
import sys
from pathlib import Path


def cache_variable(presets: dict, name: str, variable: str, seen: tuple = ()) -> object:
    """`variable` as preset `name` sets it or inherits it (the first parent that sets it wins)."""
    if name in seen:
        raise ValueError(f"preset {name}: inherits itself")
    preset = presets[name]
    value = preset.get("cacheVariables", {}).get(variable)
    if value is not None:
        return value.get("value") if isinstance(value, dict) else value
    inherits = preset.get("inherits", [])
    for parent in [inherits] if isinstance(inherits, str) else inherits:
        value = cache_variable(presets, parent, variable, (*seen, name))
        if value is not None:
            return value
    return None


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[2] / "CMakePresets.json"
    try:
        presets = {p["name"]: p for p in json.loads(path.read_text())["configurePresets"]}
    except (OSError, ValueError, KeyError) as e:
        print(f"ci/lint/presets_check.py: {path}: cannot read its configurePresets ({e})", file=sys.stderr)
        return 1
    missing = [
        name
        for name in presets
        if str(cache_variable(presets, name, "CMAKE_EXPORT_COMPILE_COMMANDS")).upper() not in ("ON", "TRUE", "1")
    ]
    for name in missing:
        print(f"{path}: configure preset '{name}' does not set CMAKE_EXPORT_COMPILE_COMMANDS ON")
    if missing:
        return 1
    print(f"ci/lint/presets_check.py: {len(presets)} configure preset(s) export compile_commands.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
