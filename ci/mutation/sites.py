"""Mutation sites and mutant schemata of C++ sources, without a C++ parser (ci/mutation/MUTATION.md).

The tree is clang-formatted (Google style), which is what makes a textual reading sound enough:
binary operators have a space on each side and template brackets none, pointers bind to the type.
Every site is a region of text that is an expression or a whole statement inside a function
body; a file's mutants are written into it as schemata, all of them in one copy, each behind
`fsdpp_mutant_on(ID)`, so one build holds every mutant and the environment chooses which is on.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

DECLARATION = 'extern "C" bool fsdpp_mutant_on(int id) noexcept; '

NOT_EXPRESSION_START = set(
    "return break continue goto throw case default using typedef namespace static_assert if else for while do "
    "switch try catch template class struct union enum friend public private protected const constexpr static "
    "auto inline extern volatile unsigned signed int long short char bool float double void size_t delete new "
    "operator typename decltype sizeof asm register thread_local co_return co_await co_yield virtual explicit "
    "mutable".split()
)
# Calls whose two arguments commute: swapping them gives an equivalent mutant, not a test of anything.
SYMMETRIC_CALLS = {"min", "max", "swap", "gcd", "lcm", "hypot", "equal", "fmin", "fmax"}
CALL_KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "alignof", "decltype", "catch", "defined"}

ROR = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "=="}
LCR = {"&&": "||", "||": "&&"}
AOR = {"+": "-", "-": "+", "*": "/", "/": "*"}

RE_ROR = re.compile(r"(?<= )(<=|>=|==|!=|<|>)(?= )")
RE_LCR = re.compile(r"(?<= )(&&|\|\|)(?= )")
RE_AOR = re.compile(r"(?<= )([-+*/])(?= )")
RE_CONST = re.compile(r"(?<![\w.'])([01])(?![\w.'])")
RE_BOOL = re.compile(r"\b(true|false)\b")
RE_NOT = re.compile(r"(?<![\w)\]!=<>])!(?!=)")
RE_SWAP = re.compile(r"\b([A-Za-z_]\w*)\(([A-Za-z_]\w*|\d+), ([A-Za-z_]\w*|\d+)\)")
RE_DECL = re.compile(
    r"^(?:(?:const|static|constexpr|volatile|unsigned|signed|struct|class|typename)\s+)*"
    r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*(?:<[^;]*?>)?(?:::[A-Za-z_]\w*)*[\s&*]+[A-Za-z_]\w*\s*(?:[=;({\[,]|$)"
)
RE_FIRST_WORD = re.compile(r"^(?:\+\+|--|\*+)?\s*([A-Za-z_]\w*)")


@dataclass
class Mutant:
    """One mutant: a region of one file, and the region's text with one change."""

    file: str
    line: int  # 1-based line of the change
    column: int  # 1-based column of the change in that line
    operator: str
    original: str  # the changed token(s), as written
    replacement: str
    region: tuple[int, int]  # offsets [start, end) of the region in the file
    kind: str  # "condition", "expression" (a return's) or "statement"
    text: str  # the region after the change, comments removed, on one line
    id: int = 0

    @property
    def key(self) -> str:
        return f"{self.file}:{self.line}:{self.column}:{self.operator}"


@dataclass
class Source:
    """A file as text, with the views the finders read."""

    path: str
    text: str
    nocomment: str = ""  # comments blanked (newlines kept)
    code: str = ""  # comments, string and char contents, preprocessor lines blanked
    depth: list[int] = field(default_factory=list)  # paren/bracket depth before each offset
    block: list[int] = field(default_factory=list)  # index into blocks of the innermost block
    blocks: list[tuple[str, int]] = field(default_factory=list)  # (kind, paren depth at its "{")
    line_starts: list[int] = field(default_factory=list)

    def line_col(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.line_starts[lo] + 1

    def in_code(self, offset: int) -> bool:
        return self.blocks[self.block[offset]][0] == "code"


def _blank(chars: list[str], start: int, end: int) -> None:
    for i in range(start, end):
        if chars[i] != "\n":
            chars[i] = " "


def _skip_string(text: str, i: int, quote: str) -> int:
    """Offset just past the literal that starts with the quote at i."""
    j = i + 1
    while j < len(text) and text[j] != quote:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def mask(text: str) -> tuple[str, str]:
    """(nocomment, code): comments blanked; and also literal contents and preprocessor lines blanked."""
    nocomment, code = list(text), list(text)
    i, n, line_start = 0, len(text), True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            _blank(code, i, j)
            i, line_start = j, False
            continue
        if c == "\n":
            line_start = True
        elif not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            _blank(nocomment, i, j)
            _blank(code, i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            _blank(nocomment, i, j)
            _blank(code, i, j)
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delim = text[i + 2 : text.index("(", i)]
            j = text.index(")" + delim + '"', i) + len(delim) + 2
            _blank(code, i + 2, j - 1)
            i = j
        elif c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = _skip_string(text, i, c)
            _blank(code, i + 1, j - 1)
            i = j
        else:
            i += 1
    return "".join(nocomment), "".join(code)


def _block_kind(code: str, brace: int, parent: str) -> str:
    start = max(code.rfind(";", 0, brace), code.rfind("{", 0, brace), code.rfind("}", 0, brace)) + 1
    prefix = " ".join(code[start:brace].split())
    words = re.findall(r"[A-Za-z_]\w*", prefix)
    if re.search(r"\b(namespace|extern)\b", prefix):
        return "namespace"
    if re.search(r"\b(class|struct|union|enum)\b", prefix) and not prefix.endswith(")"):
        return "class"
    if prefix.endswith(")") or (words and prefix.endswith(words[-1]) and words[-1] in ("else", "do", "try")):
        return "code"
    if words and prefix.endswith(words[-1]) and words[-1] in ("mutable", "noexcept", "override", "const", "final"):
        return "code"
    if prefix == "" or prefix.endswith(":"):
        return parent if parent in ("code", "init") else "other"
    return "init" if parent in ("code", "init") else "other"


def analyze(path: str, text: str) -> Source:
    src = Source(path=path, text=text)
    src.nocomment, src.code = mask(text)
    code = src.code
    src.blocks = [("namespace", 0)]
    stack, depth = [0], 0
    src.depth, src.block = [0] * len(code), [0] * len(code)
    for i, c in enumerate(code):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "{":
            src.blocks.append((_block_kind(code, i, src.blocks[stack[-1]][0]), depth))
            stack.append(len(src.blocks) - 1)
        elif c == "}" and len(stack) > 1:
            stack.pop()
        src.depth[i], src.block[i] = depth, stack[-1]
    src.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return src


def _match_paren(code: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] in "([":
            depth += 1
        elif code[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    return -1


def _trim(code: str, start: int, end: int) -> tuple[int, int]:
    while start < end and code[start].isspace():
        start += 1
    while end > start and code[end - 1].isspace():
        end -= 1
    return start, end


def _region_ok(src: Source, start: int, end: int) -> bool:
    body = src.code[start:end]
    if not body.strip() or "{" in body or "}" in body or not src.in_code(start):
        return False
    return not re.search(r"^\s*#", src.nocomment[start:end], re.M)


def condition_regions(src: Source) -> tuple[list[tuple[int, int]], list[int]]:
    """if/while conditions and for-loop conditions; also the ")" of each control header."""
    regions, header_ends = [], []
    for m in re.finditer(r"\b(if|while|for|switch)\s*\(", src.code):
        open_at = m.end() - 1
        close = _match_paren(src.code, open_at)
        if close < 0 or not src.in_code(m.start()):
            continue
        header_ends.append(close)
        if m.group(1) == "switch":
            continue
        start, end = open_at + 1, close
        if m.group(1) == "for":
            parts = [i for i in range(start, end) if src.code[i] == ";" and src.depth[i] == src.depth[open_at]]
            if len(parts) != 2:
                continue
            start, end = parts[0] + 1, parts[1]
        start, end = _trim(src.code, start, end)
        body = src.code[start:end]
        if ";" in body or re.search(r"(?<![=!<>])=(?!=)", body) or not _region_ok(src, start, end):
            continue
        regions.append((start, end))
    return regions, header_ends


def return_regions(src: Source) -> list[tuple[int, int]]:
    regions = []
    for m in re.finditer(r"\breturn\b", src.code):
        if not src.in_code(m.start()):
            continue
        level, i = src.depth[m.start()], m.end()
        while i < len(src.code) and not (src.code[i] in ";{}" and src.depth[i] == level):
            i += 1
        if i >= len(src.code) or src.code[i] != ";":
            continue
        start, end = _trim(src.code, m.end(), i)
        if _region_ok(src, start, end):
            regions.append((start, end))
    return regions


def _statement_starts(src: Source, header_ends: list[int]) -> set[int]:
    code = src.code
    anchors = [i for i, c in enumerate(code) if c in ";{}"] + header_ends
    anchors += [m.end() - 1 for m in re.finditer(r"\b(else|do)\b", code)]
    anchors += [m.end() - 1 for m in re.finditer(r"\bcase\b(?:[^;:]|::)*:(?!:)|\bdefault\s*:(?!:)", code)]
    starts = set()
    for a in anchors:
        j = a + 1
        while j < len(code) and code[j].isspace():
            j += 1
        if j < len(code) and (code[j].isalpha() or code[j] in "_*+-"):
            starts.add(j)
    return starts


def statement_regions(src: Source, header_ends: list[int]) -> list[tuple[int, int]]:
    """Expression statements (calls, assignments, increments) that are not declarations."""
    code, regions = src.code, []
    for j in sorted(_statement_starts(src, header_ends)):
        blk = src.block[j]
        if src.blocks[blk][0] != "code" or src.depth[j] != src.blocks[blk][1]:
            continue
        i = j
        while i < len(code) and not (code[i] in ";{}" and src.depth[i] == src.depth[j]):
            i += 1
        if i >= len(code) or code[i] != ";":
            continue
        body = " ".join(code[j:i].split())
        first = RE_FIRST_WORD.match(body)
        if not first or first.group(1) in NOT_EXPRESSION_START or RE_DECL.match(body + ";"):
            continue
        if re.match(r"^[A-Za-z_]\w*\s*:(?!:)", body) or not _region_ok(src, j, i + 1):
            continue
        regions.append((j, i + 1))
    return regions


def _flat(text: str) -> str:
    return " ".join(text.split())


def _string_beside(src: Source, at: int, end: int) -> bool:
    before = src.nocomment[:at].rstrip()[-1:]
    after = src.nocomment[end:].lstrip()[:1]
    return before == '"' or after == '"'


def _token_changes(src: Source, start: int, end: int) -> list[tuple[str, int, int, str]]:
    """(operator, offset, end offset, replacement) of every one-token change inside the region."""
    code, changes = src.code, []
    body = code[start:end]
    for op, regex, table in (("ror", RE_ROR, ROR), ("lcr", RE_LCR, LCR), ("aor", RE_AOR, AOR)):
        for m in regex.finditer(body):
            a, b = start + m.start(1), start + m.end(1)
            if op == "aor" and m.group(1) == "+" and _string_beside(src, a, b):
                continue
            changes.append((op, a, b, table[m.group(1)]))
    for m in RE_CONST.finditer(body):
        changes.append(("constant", start + m.start(1), start + m.end(1), "1" if m.group(1) == "0" else "0"))
    for m in RE_BOOL.finditer(body):
        changes.append(("bool", start + m.start(1), start + m.end(1), "false" if m.group(1) == "true" else "true"))
    for m in RE_NOT.finditer(body):
        changes.append(("not", start + m.start(), start + m.end(), ""))
    return changes


def _swaps(src: Source, start: int, end: int) -> list[tuple[str, int, int, str]]:
    changes = []
    for m in RE_SWAP.finditer(src.code[start:end]):
        name, a, b = m.groups()
        if name in SYMMETRIC_CALLS or name in CALL_KEYWORDS or a == b or a.isdigit() != b.isdigit():
            continue
        if a in NOT_EXPRESSION_START or b in NOT_EXPRESSION_START or {a, b} & {"true", "false", "nullptr"}:
            continue
        s = start + m.start(2)
        changes.append(("swap", s, start + m.end(3), f"{b}, {a}"))
    return changes


def region_mutants(src: Source, start: int, end: int, kind: str, is_condition: bool) -> list[Mutant]:
    changes = _token_changes(src, start, end) + _swaps(src, start, end)
    if is_condition and not any(op in ("ror", "lcr", "not") for op, *_ in changes):
        changes.append(("negate", start, end, "!(" + _flat(src.nocomment[start:end]) + ")"))
    mutants = []
    for op, a, b, repl in changes:
        text = src.nocomment[start:a] + repl + src.nocomment[b:end] if op != "negate" else repl
        line, col = src.line_col(a)
        mutants.append(Mutant(src.path, line, col, op, src.text[a:b], repl, (start, end), kind, _flat(text)))
    if kind == "statement":
        line, col = src.line_col(start)
        mutants.append(
            Mutant(src.path, line, col, "delete", _flat(src.nocomment[start:end]), "", (start, end), kind, "")
        )
    return mutants


def find_mutants(path: str, text: str) -> list[Mutant]:
    """Every mutant of the file, in file order; regions never overlap."""
    src = analyze(path, text)
    ns = re.search(r"^namespace\b", src.code, re.M)
    first_allowed = ns.start() + 1 if ns else len(text)
    conds, header_ends = condition_regions(src)
    regions = [(s, e, "condition", True) for s, e in conds]
    regions += [(s, e, "expression", False) for s, e in return_regions(src)]
    regions += [(s, e, "statement", False) for s, e in statement_regions(src, header_ends)]
    regions.sort()
    mutants, last_end = [], first_allowed
    for start, end, kind, is_cond in regions:
        if start < last_end:
            continue
        mutants += region_mutants(src, start, end, kind, is_cond)
        last_end = end
    return mutants


def apply_schemata(text: str, mutants: list[Mutant]) -> tuple[str, dict[int, tuple[int, int, int]]]:
    """The file with every given mutant written in as a schema.

    Returns the text and, for each mutant id, (line, first column, last column) of its part of
    the schema, so that a compiler error can be traced to the mutant that caused it. Lines do
    not move: mutated copies are written on one line and the original keeps its own lines.
    """
    by_region: dict[tuple[int, int], list[Mutant]] = {}
    for m in mutants:
        by_region.setdefault(m.region, []).append(m)
    ns = re.search(r"^namespace\b", text, re.M)
    if by_region and (ns is None or ns.start() > min(by_region)[0]):
        raise ValueError(f"{mutants[0].file}: a site before the first namespace line")
    out, spans, pos = [], {}, 0
    pieces = sorted(by_region.items())
    if ns is not None and pieces:
        out.append(text[: ns.start()] + DECLARATION)
        pos = ns.start()
    for (start, end), ms in pieces:
        out.append(text[pos:start])
        prefix = "".join(out)
        line = prefix.count("\n") + 1
        col = len(prefix) - (prefix.rfind("\n") + 1) + 1
        kind = ms[0].kind
        # A condition is converted to bool as `if` converts it (explicitly: std::optional, std::function).
        cast = "static_cast<bool>" if kind == "condition" else ""
        schema = "" if kind == "statement" else "("
        for m in sorted(ms, key=lambda m: m.id):
            if kind == "statement":
                part = f"if (fsdpp_mutant_on({m.id})) {{ {m.text} }} else "
            else:
                part = f"fsdpp_mutant_on({m.id}) ? {cast}({m.text}) : "
            spans[m.id] = (line, col + len(schema), col + len(schema) + len(part) - 1)
            schema += part
        original = text[start:end]
        schema += "{ " + original + " }" if kind == "statement" else f"{cast}({original}))"
        out.append(schema)
        pos = end
    out.append(text[pos:])
    return "".join(out), spans


def relocate(m: Mutant, old_text: str, new_text: str) -> Mutant:
    """The same mutant in a later version of its file. Its line is followed through a line diff
    of the two versions, indentation aside, as a patch would carry it; a line the diff lost (a
    block moved) is the new file's one line that reads as it did. On that line, the site at the
    same place with the same operator and change. Raises ValueError when the line was changed,
    removed, or moved and now written twice, or holds no such site: a kill would then be
    checked against nothing, or against a guess."""
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    old_line = old_lines[m.line - 1]
    new_no = None
    matcher = difflib.SequenceMatcher(
        None, [x.strip() for x in old_lines], [x.strip() for x in new_lines], autojunk=False
    )
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal" and i1 <= m.line - 1 < i2:
            new_no = j1 + (m.line - 1 - i1) + 1
    same = [j + 1 for j, x in enumerate(new_lines) if x.strip() == old_line.strip()]
    if new_no is None and len(same) == 1:  # moved (a block lifted out of a scope): the one such line
        new_no = same[0]
    if new_no is None:
        raise ValueError(f"{m.key}: its line '{old_line.strip()}' was changed or removed since")
    line = new_lines[new_no - 1]
    column = m.column + len(line) - len(old_line)  # the same line, re-indented at most
    found = [
        c
        for c in find_mutants(m.file, new_text)
        if (c.line, c.column, c.operator, c.original, c.replacement, c.kind)
        == (new_no, column, m.operator, m.original, m.replacement, m.kind)
    ]
    if len(found) != 1:
        raise ValueError(f"{m.key}: line {new_no} now, but no such site on it")
    found[0].id = m.id
    return found[0]
