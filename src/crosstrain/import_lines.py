"""The crosstrain modules a module's source imports, read from its lines: what `packaging.node_side_files` follows
to find the files that run on the nodes, without parsing them (parsing the node side costs a cold
`crosstrain render` a tenth of its time)."""

from __future__ import annotations

import re
from collections.abc import Iterator

#: An import statement at the start of a line: its indent, and `from MODULE import NAMES` or `import NAMES`.
_IMPORT = re.compile(r"^([ \t]*)(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]*))", re.M)
#: `if TYPE_CHECKING:`, whose block (and its `else`) holds imports for type checkers only.
_TYPE_CHECKING = re.compile(r"^([ \t]*)if TYPE_CHECKING:", re.M)


def crosstrain_imports(source: str) -> Iterator[str]:
    """The crosstrain modules (and names that may be modules) a module's source imports, at import time or in a
    function, outside `if TYPE_CHECKING:`. Read from the lines themselves, not a syntax tree (parsing the node
    side costs a cold `crosstrain render` a tenth of its time); the source is ruff-formatted, and
    tests/test_packaging.py holds this reading to the syntax tree's for every module of the package."""
    source = _blank_long_strings(source)
    skipped = []
    for block in _TYPE_CHECKING.finditer(source) if "TYPE_CHECKING:" in source else ():
        indent, end = len(block.group(1)), block.end()
        for line in re.finditer(r"^([ \t]*)(\S[^\n]*)", source[end:], re.M):
            if len(line.group(1)) <= indent and not line.group(2).startswith(("else:", "elif ")):
                skipped.append((block.start(), end + line.start()))
                break
        else:
            skipped.append((block.start(), len(source)))
    for found in _IMPORT.finditer(source):
        if any(start <= found.start() < stop for start, stop in skipped):
            continue
        module, names, plain = found.group(2), found.group(3), found.group(4)
        if module is not None:
            if module.split(".")[0] == "crosstrain":
                yield module
                yield from (f"{module}.{name}" for name in _names(names))
        else:
            yield from (name for name in _names(plain) if name.split(".")[0] == "crosstrain")


def _blank_long_strings(source: str) -> str:
    """`source` with the text of every triple-quoted string made spaces, its lines and offsets kept: a string
    ends at the first same triple quote after it that no backslash escapes. Found with `str.find` (one lazy
    regular expression over the node side was a cold render's hot spot)."""
    pieces, done, start = [], 0, 0
    nearest = {quote: source.find(quote) for quote in ('"""', "'''")}
    while (opening := _next_triple_quote(source, start, nearest)) != -1:
        quote = source[opening : opening + 3]
        close = opening + 3
        while (close := source.find(quote, close)) != -1 and source[close - 1] == "\\":
            close += 1
        if close == -1:  # never closed: not a string; look on from the next character
            start = opening + 1
            continue
        start = close + 3
        blank = "\n".join(" " * len(line) for line in source[opening:start].split("\n"))
        pieces += [source[done:opening], blank]
        done = start
    return "".join([*pieces, source[done:]])


def _next_triple_quote(source: str, start: int, nearest: dict[str, int]) -> int:
    """Where the next triple quote at or after `start` is (-1: none); `nearest` keeps where each kind was last found,
    so a kind the source lacks, or has only far ahead, is not looked for again at every string."""
    for quote, at in nearest.items():
        if at != -1 and at < start:
            nearest[quote] = source.find(quote, start)
    return min((at for at in nearest.values() if at != -1), default=-1)


def _names(text: str) -> list[str]:
    """The names of an import's list (`a, b as c`, or in parentheses over lines, with comments)."""
    text = re.sub(r"#[^\n]*", "", text.split(";")[0]).strip().strip("()")
    return [part.split()[0] for part in text.split(",") if part.strip()]
