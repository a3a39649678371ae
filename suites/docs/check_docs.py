#!/usr/bin/env python3
"""Docs that drift from the code fail CI: the checks behind ctest's docs.* tests.

    check_docs.py commands       --fsdpp BIN [--repo DIR] [FILE.md ...]
    check_docs.py cli_reference  --fsdpp BIN [--repo DIR] [--reference FILE.md]
    check_docs.py readme_shape   [--repo DIR] [--readme FILE.md]
    check_docs.py readme_example --fsdpp BIN [--repo DIR] [--readme FILE.md]
    check_docs.py self_test      --fsdpp BIN

Each prints one line per problem (file:line: what is wrong) and exits 1 if there was any, 0
otherwise; bad usage exits 2. Python (standard library only) rather than C++: the work is
text (markdown fences, shell words, regular expressions) and running the binary; nothing is
timed or computed.

commands: every `fsdpp ...` command of README.md, CONTRIBUTING.md and docs/*.md (not
  docs/notes/, dated history) must parse. Checked, with the real binary under
  FSDPP_PARSE_ONLY=1 (harness/cli/parse_only.h: parse and check as a run would, run nothing,
  paths need not exist), from the repository root:
  - each command in a fenced block tagged bash, sh, shell, zsh or console (untagged and other
    blocks are synopses, output or files, and are not read). Lines ending in `\\` continue;
    a `$ ` prompt is dropped (in console blocks only `$ ` lines are commands); heredoc bodies
    and `#` comments are skipped; `fsdpp`, `build/fsdpp`, `./build/fsdpp` (any path ending
    in /fsdpp) count, at the start of a command, after `&&`, `||`, `;`, `|`, `VAR=value`
    assignments or a launcher (srun, time, env, ...). Redirections are dropped. Shell
    variables are substituted: `${X:-default}` by its default, MASTER_ADDR and a few
    others by a plausible value, any other by 2 (valid wherever a count, a size or, in this
    mode, a path or a name is expected; an enum flag's value must be written out); `$(...)`
    by a placeholder.
  - each inline code span that starts with `fsdpp ` (or build/fsdpp): a prose mention, often
    a fragment, so it is not parsed whole; its subcommand must exist and each `--flag` in it
    must be a flag of that subcommand (FSDPP_LIST_FLAGS=1). Spans with a placeholder where
    the subcommand goes (`fsdpp <subcommand> --help`) are skipped.
cli_reference: every subcommand and long flag `FSDPP_LIST_FLAGS=1 fsdpp` prints appears in
  docs/cli.md. A subcommand needs a heading that names it (`## fsdpp data prepare`; for a
  group such as `results`, a heading of one of its subcommands is enough). Its flags must
  appear in that heading's section (up to the next heading of the same or a higher level),
  or outside every subcommand's section (the preamble, a `## Launch flags` section: flags
  several subcommands share). The top level's flags, and those of a subcommand without a
  heading, may appear anywhere.
readme_shape: README.md has at most 220 lines, none over 120 characters, and every `## `
  section holds at least one link.
readme_example: each fenced block of README.md right after the line
  `<!-- docs-test: run -->` runs under `bash -euo pipefail` in a new scratch directory (the
  working directory), with `fsdpp` on PATH resolving to the built binary and FSDPP_REPO
  naming the repository root (for files the repository or ci/fetch_assets.sh provide:
  "$FSDPP_REPO/..."), and must exit 0 within 300 s. No such block is a failure.
self_test: runs the checks over suites/docs/fixtures/, which hold known mistakes (an unknown
  flag, a renamed flag, a README of 230 lines, ...), and fails unless each is reported and
  the correct lines are not.
"""

import argparse
import concurrent.futures
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

SHELL_TAGS = {"bash", "sh", "shell", "zsh", "console", "shell-session"}
# Words that may stand before fsdpp in a command: they run the command that follows.
LAUNCHERS = {"srun", "time", "env", "exec", "nohup", "timeout", "taskset", "numactl", "sudo", "mpirun", "torchrun"}
# Plausible values for the shell variables docs use in launch examples.
KNOWN_VARIABLES = {
    "MASTER_ADDR": "10.0.0.1",
    "MASTER_PORT": "29500",
    "HOSTNAME": "node0",
    "HOME": "/home/user",
    "PWD": "/work",
}

MAX_README_LINES = 220
MAX_LINE_CHARS = 120
EXAMPLE_MARKER = "<!-- docs-test: run -->"
EXAMPLE_TIMEOUT_S = 300


def doc_files(repo):
    """README.md, CONTRIBUTING.md and docs/*.md: the documents a user reads."""
    files = [repo / "README.md", repo / "CONTRIBUTING.md"] + sorted((repo / "docs").glob("*.md"))
    return [f for f in files if f.is_file()]


def rel(path, repo):
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(path)


# ---- markdown ---------------------------------------------------------------------------


FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")


def fenced_blocks(lines):
    """Yields (info, [(line_number, text), ...]) for each fenced block; numbers from 1."""
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, body = m.group(2), m.group(3).lower(), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), lines[i]):
            body.append((i + 1, lines[i]))
            i += 1
        yield info, body
        i += 1


def prose_lines(lines):
    """Yields (line_number, text) for the lines outside fenced blocks."""
    inside = None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(2)
        elif inside is not None and re.match(r"^\s*" + re.escape(inside[0]) + "{%d,}\\s*$" % len(inside), line):
            inside = None
        elif inside is None:
            yield number, line


def headings(lines):
    """Yields (line_number, level, text) of the ATX headings outside fenced blocks."""
    for number, line in prose_lines(lines):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            yield number, len(m.group(1)), m.group(2)


# ---- shell commands ---------------------------------------------------------------------


def substitute_variables(text):
    """Shell expansions replaced by plausible words (see the module comment)."""

    def command_substitution(s):
        out, i = [], 0
        while i < len(s):
            if s.startswith("$(", i):
                depth, j = 1, i + 2
                while j < len(s) and depth:
                    depth += {"(": 1, ")": -1}.get(s[j], 0)
                    j += 1
                out.append("<command-output>")
                i = j
            else:
                out.append(s[i])
                i += 1
        return "".join(out)

    def value_of(name, default=None):
        if default is not None:
            return default
        return KNOWN_VARIABLES.get(name, "2")

    text = command_substitution(text)
    text = re.sub(r"\$\{([A-Za-z_]\w*):?-([^}]*)\}", lambda m: value_of(m.group(1), m.group(2)), text)
    text = re.sub(r"\$\{([A-Za-z_]\w*)\}", lambda m: value_of(m.group(1)), text)
    text = re.sub(r"\$([A-Za-z_]\w*)", lambda m: value_of(m.group(1)), text)
    return text


REDIRECTION = re.compile(r"(?<!\S)\d*(?:>>?|<(?![\w.-]+>))(?:&\d+|\s*[^\s<>|&;]+)")


def is_fsdpp(word):
    return word == "fsdpp" or word.endswith("/fsdpp")


def commands_in_line(text):
    """The fsdpp argument lists (argv[1:]) of one logical shell line."""
    text = REDIRECTION.sub(" ", substitute_variables(text))
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as e:  # an unclosed quote
        raise ValueError(f"cannot split into shell words: {e}") from None
    found, simple = [], []
    for word in words + [";"]:
        if word and set(word) <= set(";&|()"):
            rest = simple
            while rest and re.match(r"^[A-Za-z_]\w*=", rest[0]):  # VAR=value before a command
                rest = rest[1:]
            if rest and is_fsdpp(rest[0]):
                found.append(rest[1:])
            elif rest and rest[0] in LAUNCHERS:
                at = next((k for k, w in enumerate(rest) if is_fsdpp(w)), None)
                if at is not None:
                    found.append(rest[at + 1 :])
            simple = []
        else:
            simple.append(word)
    return found


def shell_commands(lines):
    """Yields (line_number, shown_text, argv[1:]) for each fsdpp command in shell blocks."""
    for info, body in fenced_blocks(lines):
        if info not in SHELL_TAGS:
            continue
        console = info in ("console", "shell-session")
        heredoc_end = None
        logical, start = "", None
        for number, line in body:
            if heredoc_end is not None:
                if line.strip() == heredoc_end:
                    heredoc_end = None
                continue
            if start is None:
                stripped = line.strip()
                if console and not stripped.startswith("$ "):
                    continue
                if stripped.startswith("$ "):
                    line = stripped[2:]
                start = number
            if line.rstrip().endswith("\\"):
                logical += line.rstrip()[:-1] + " "
                continue
            logical += line
            m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", logical)
            if m:
                heredoc_end = m.group(1)
            try:
                for argv in commands_in_line(logical):
                    yield start, " ".join(logical.split()), argv, None
            except ValueError as e:
                if re.search(r"(^|[\s;&|(])(\S*/)?fsdpp\s", logical):
                    yield start, " ".join(logical.split()), None, str(e)
            logical, start = "", None


INLINE_COMMAND = re.compile(r"(?<!`)`((?:\./)?(?:build/)?fsdpp [^`]+)`(?!`)")


def inline_commands(lines):
    """Yields (line_number, span_text) for inline code spans that start with fsdpp."""
    for number, line in prose_lines(lines):
        for m in INLINE_COMMAND.finditer(line):
            yield number, m.group(1)


# ---- the binary -------------------------------------------------------------------------


def run_fsdpp(fsdpp, argv, env_extra, cwd, timeout=60):
    env = dict(os.environ, **env_extra)
    try:
        p = subprocess.run([fsdpp] + argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout} s"
    return p.returncode, (p.stdout + p.stderr).strip()


def cli_flags(fsdpp):
    """{subcommand path (tuple of names, () for fsdpp itself): [long flags]}."""
    code, output = run_fsdpp(fsdpp, [], {"FSDPP_LIST_FLAGS": "1"}, REPO)
    if code != 0:
        sys.exit(f"check_docs: FSDPP_LIST_FLAGS=1 {fsdpp} exited {code}: {output}")
    table = {(): []}
    for line in output.splitlines():
        words = line.split()
        if not words or words[0] != "fsdpp":
            sys.exit(f"check_docs: FSDPP_LIST_FLAGS=1 {fsdpp}: unexpected line '{line}' (expected 'fsdpp ...')")
        if words[-1].startswith("--"):
            table.setdefault(tuple(words[1:-1]), []).append(words[-1])
        else:
            table.setdefault(tuple(words[1:]), [])
    return table


# ---- the checks -------------------------------------------------------------------------


def check_commands(fsdpp, files, repo):
    problems, jobs = [], []
    table = cli_flags(fsdpp)
    for path in files:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        where = rel(path, repo)
        for number, shown, argv, error in shell_commands(lines):
            if error:
                problems.append(f"{where}:{number}: {shown}\n    {error}")
            else:
                jobs.append((f"{where}:{number}", shown, argv))
        for number, span in inline_commands(lines):
            problems += [f"{where}:{number}: `{span}`\n    {p}" for p in check_inline(span, table)]

    def parse(job):
        where, shown, argv = job
        code, output = run_fsdpp(fsdpp, argv, {"FSDPP_PARSE_ONLY": "1"}, repo)
        return job, code, output

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for (where, shown, _), code, output in pool.map(parse, jobs):
            if code != 0:
                last = output.splitlines()[-1] if output else "(no output)"
                problems.append(f"{where}: {shown}\n    exit {code}: {last}")
    print(f"check_docs commands: {len(jobs)} commands parsed in {len(files)} files")
    return problems


def check_inline(span, table):
    words = span.split()[1:]
    path = ()
    while words and path + (words[0],) in table:
        path += (words[0],)
        words = words[1:]
    children = [p[-1] for p in table if len(p) == len(path) + 1 and p[: len(path)] == path]
    if words and not words[0].startswith("-"):
        if children and re.fullmatch(r"[a-z][a-z0-9-]*", words[0]):
            return [f"no subcommand `{' '.join(('fsdpp',) + path + (words[0],))}`"]
        if children:
            return []  # a placeholder where the subcommand goes: nothing to check
    problems = []
    for word in words:
        flag = word.strip("[](),.;:'\"").split("=")[0]
        if flag.startswith("--") and len(flag) > 2 and flag not in table[path] + ["--help"]:
            problems.append(f"`{' '.join(('fsdpp',) + path)}` has no flag {flag}")
    return problems


def heading_words(text):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", " ")
    words = text.split()
    if words and words[0] == "fsdpp":
        words = words[1:]
    return [w.rstrip(":,.") for w in words]


def check_cli_reference(fsdpp, reference, repo):
    table = cli_flags(fsdpp)
    where = rel(reference, repo)
    if not reference.is_file():
        return [f"{where}: no such file (the CLI reference)"]
    lines = reference.read_text(encoding="utf-8").splitlines()
    all_heads = list(headings(lines))

    def section(path):
        """(first, end) line numbers of the heading that names path exactly and its text."""
        children = {p[len(path)] for p in table if len(p) > len(path) and p[: len(path)] == path}
        for k, (number, level, text) in enumerate(all_heads):
            words = heading_words(text)
            if tuple(words[: len(path)]) == path and (len(words) == len(path) or words[len(path)] not in children):
                return number, next((n for n, lv, _ in all_heads[k + 1 :] if lv <= level), len(lines) + 1)
        return None

    def text(first, end):
        return "\n".join(lines[first - 1 : end - 1])

    sections = {path: section(path) for path in table if path}
    # Lines outside every subcommand's section (the preamble, `## Launch flags`): a flag
    # there is documented for every subcommand that has it.
    inside = {n for span in sections.values() if span for n in range(*span)}
    common = "\n".join(line for n, line in enumerate(lines, 1) if n not in inside)
    whole = "\n".join(lines)

    problems = []
    for path in sorted(table):
        name = " ".join(("fsdpp",) + path)
        span = sections.get(path)
        if path and span is None:
            is_group = any(len(p) > len(path) and p[: len(path)] == path for p in table)
            if not (is_group and any(tuple(heading_words(h)[: len(path)]) == path for _, _, h in all_heads)):
                problems.append(f"{where}: no heading names `{name}`")
        for flag in table[path]:
            pattern = re.compile(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])")
            if not path or span is None:
                found, scope = pattern.search(whole), "anywhere"
            else:
                found = pattern.search(text(*span)) or pattern.search(common)
                scope = f"in the section of `{name}` or outside every subcommand's section"
            if not found:
                problems.append(f"{where}: `{name}` flag {flag} is not documented {scope}")
    print(f"check_docs cli_reference: {len(table)} subcommands, {sum(map(len, table.values()))} flags checked")
    return problems


def check_readme_shape(readme, repo):
    where = rel(readme, repo)
    if not readme.is_file():
        return [f"{where}: no such file"]
    lines = readme.read_text(encoding="utf-8").splitlines()
    problems = []
    if len(lines) > MAX_README_LINES:
        problems.append(f"{where}: {len(lines)} lines (at most {MAX_README_LINES})")
    for number, line in enumerate(lines, 1):
        if len(line) > MAX_LINE_CHARS:
            problems.append(f"{where}:{number}: {len(line)} characters (at most {MAX_LINE_CHARS})")
    link = re.compile(r"\]\([^)]+\)|\]\[[^\]]*\]|<https?://[^>]+>|https?://\S+")
    sections = [(n, t) for n, level, t in headings(lines) if level == 2]
    boundaries = [n for n, level, _ in headings(lines) if level <= 2] + [len(lines) + 1]
    for number, title in sections:
        end = next(b for b in boundaries if b > number)
        if not any(link.search(line) for line in lines[number - 1 : end - 1]):
            problems.append(f"{where}:{number}: section '## {title}' links nowhere (expected a link to its detail)")
    print(f"check_docs readme_shape: {len(lines)} lines, {len(sections)} sections")
    return problems


def example_blocks(lines):
    """(line_number, [lines]) of each fenced block right after the marker line."""
    blocks = []
    for number, line in enumerate(lines, 1):
        if line.strip() != EXAMPLE_MARKER:
            continue
        nxt = number  # index of the next line
        if nxt >= len(lines) or not FENCE.match(lines[nxt]):
            blocks.append((number, None))
            continue
        body = next(b for info, b in fenced_blocks(lines[nxt:]))
        blocks.append((nxt + 1, [text for _, text in body]))
    return blocks


def check_readme_example(fsdpp, readme, repo):
    where = rel(readme, repo)
    if not readme.is_file():
        return [f"{where}: no such file"]
    blocks = example_blocks(readme.read_text(encoding="utf-8").splitlines())
    if not blocks:
        return [f"{where}: no fenced block follows a '{EXAMPLE_MARKER}' line"]
    problems = []
    for number, body in blocks:
        if body is None:
            problems.append(f"{where}:{number}: '{EXAMPLE_MARKER}' is not followed by a fenced block")
            continue
        scratch = Path(tempfile.mkdtemp(prefix="fsdpp-readme-example-"))
        bin_dir = scratch / ".bin"
        bin_dir.mkdir()
        (bin_dir / "fsdpp").symlink_to(Path(fsdpp).resolve())
        work = scratch / "work"
        work.mkdir()
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", FSDPP_REPO=str(repo))
        script = "\n".join(body) + "\n"
        t0 = time.monotonic()
        try:
            p = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=EXAMPLE_TIMEOUT_S,
            )
            code, output = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            code, output = 124, f"timed out after {EXAMPLE_TIMEOUT_S} s\n{e.stdout or ''}{e.stderr or ''}"
        seconds = time.monotonic() - t0
        print(f"check_docs readme_example: the block at {where}:{number} exited {code} in {seconds:.1f} s")
        if code != 0:
            tail = "\n".join("    " + line for line in str(output).splitlines()[-15:])
            problems.append(f"{where}:{number}: the example block exited {code}; its output's end:\n{tail}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return problems


# ---- the self-test ----------------------------------------------------------------------


def self_test(fsdpp):
    """The checks run over fixtures with known mistakes: each must be reported, exactly."""
    failures = []

    def expect(name, problems, wanted, unwanted=()):
        text = "\n".join(problems)
        for w in wanted:
            if w not in text:
                failures.append(f"{name}: expected a report containing {w!r}; got:\n{text or '(none)'}")
        for u in unwanted:
            if u in text:
                failures.append(f"{name}: {u!r} was reported but is correct; got:\n{text}")

    problems = check_commands(fsdpp, [FIXTURES / "bad_commands.md"], FIXTURES)
    expect(
        "commands",
        problems,
        [
            "bad_commands.md:8: fsdpp train --no-such-flag 1",
            "unexpected argument(s): --no-such-flag 1",
            "bad_commands.md:12: build/fsdpp train",
            "--learning-rate",
            "bad_commands.md:17: fsdpp generate --model <dir> --prompt-file p.txt",
            "bad_commands.md:24:",
            "full_shrd",
            "bad_commands.md:32: fsdpp results compare new.json --history results/history --widow 3",
            "bad_commands.md:36: `fsdpp eval --seqlen 8`",
            "`fsdpp eval` has no flag --seqlen",
            "bad_commands.md:37: `fsdpp data prepar --input x`",
            "no subcommand `fsdpp data prepar`",
        ],
        [
            "bad_commands.md:4:",
            "bad_commands.md:14:",
            "bad_commands.md:19:",
            "bad_commands.md:28:",
            "bad_commands.md:30:",
            "bad_commands.md:35:",
            "bad_commands.md:38:",
            "bad_commands.md:39:",
            "--window",
            "--list",
            "text-block",
            "yaml-block",
            "in-a-heredoc",
            "commented-out",
            "not-a-flag",
            "this line is output",
        ],
    )
    if len(problems) != 7:
        failures.append(f"commands: expected 7 reports, got {len(problems)}:\n" + "\n".join(problems))

    problems = check_cli_reference(fsdpp, FIXTURES / "cli_missing.md", FIXTURES)
    expect(
        "cli_reference",
        problems,
        [
            "`fsdpp train` flag --max-lr is not documented in the section of `fsdpp train`",
            "`fsdpp eval` flag --seq-len is not documented in the section of `fsdpp eval`",
            "no heading names `fsdpp checkpoint export`",
            "no heading names `fsdpp data prepare`",
        ],
        [
            "flag --lr is",
            "flag --nproc",
            "flag --version",
            "`fsdpp eval` flag --model ",
            "no heading names `fsdpp train`",
            "no heading names `fsdpp eval`",
        ],
    )

    problems = check_readme_shape(FIXTURES / "long_readme.md", FIXTURES)
    expect(
        "readme_shape",
        problems,
        [
            "long_readme.md: 230 lines (at most 220)",
            "long_readme.md:5: 121 characters",
            "long_readme.md:12: section '## Unlinked' links nowhere",
        ],
        ["long_readme.md:7:", "'## Linked'"],
    )
    problems = check_readme_shape(FIXTURES / "good_readme.md", FIXTURES)
    if problems:
        failures.append("readme_shape (good): expected no report, got:\n" + "\n".join(problems))

    problems = check_readme_example(fsdpp, FIXTURES / "good_readme.md", FIXTURES)
    if problems:
        failures.append("readme_example (good): expected no report, got:\n" + "\n".join(problems))
    problems = check_readme_example(fsdpp, FIXTURES / "long_readme.md", FIXTURES)
    expect("readme_example (none)", problems, ["no fenced block follows"])
    problems = check_readme_example(fsdpp, FIXTURES / "failing_example.md", FIXTURES)
    expect("readme_example (failing)", problems, ["failing_example.md:4: the example block exited 2", "fsdpp: error:"])

    for f in failures:
        print("SELF-TEST FAILED: " + f)
    print(f"check_docs self_test: {'FAILED' if failures else 'every planted mistake was reported'}")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("check", choices=["commands", "cli_reference", "readme_shape", "readme_example", "self_test"])
    parser.add_argument("files", nargs="*", type=Path, help="commands: the documents (default: the docs)")
    parser.add_argument("--fsdpp", help="the built fsdpp binary")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository root")
    parser.add_argument("--reference", type=Path, help="cli_reference: the CLI reference (default docs/cli.md)")
    parser.add_argument("--readme", type=Path, help="readme_*: the README (default README.md)")
    args = parser.parse_args()
    repo = args.repo.resolve()
    if args.check != "readme_shape" and not (args.fsdpp and os.access(args.fsdpp, os.X_OK)):
        print(f"check_docs: --fsdpp {args.fsdpp}: expected the built fsdpp binary", file=sys.stderr)
        return 2
    if args.fsdpp:
        args.fsdpp = str(Path(args.fsdpp).resolve())  # the checks run it from other directories
    readme = args.readme or repo / "README.md"
    if args.check == "commands":
        problems = check_commands(args.fsdpp, args.files or doc_files(repo), repo)
    elif args.check == "cli_reference":
        problems = check_cli_reference(args.fsdpp, args.reference or repo / "docs" / "cli.md", repo)
    elif args.check == "readme_shape":
        problems = check_readme_shape(readme, repo)
    elif args.check == "readme_example":
        problems = check_readme_example(args.fsdpp, readme, repo)
    else:
        problems = self_test(args.fsdpp)
        return 1 if problems else 0
    for p in problems:
        print(p)
    print(f"check_docs {args.check}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
