"""The crosstrain modules a module's source imports, read from its lines: what `packaging.node_side_files` follows
to find the files that run on the nodes, without parsing them (parsing the node side costs a cold
`crosstrain render` a tenth of its time)."""

from __future__ import annotations

import re
from collections.abc import Iterator

#: A string that spans lines (a docstring): blanked before imports are looked for, so that an example in one
#: is not read as an import.
_LONG_STRING = re.compile(r"""(?s)('{3}|"{3}).*?(?<!\\)\1""")
#: An import statement at the start of a line: its indent, and `from MODULE import NAMES` or `import NAMES`.
_IMPORT = re.compile(r"^([ \t]*)(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([^\n]*))", re.M)
#: `if TYPE_CHECKING:`, whose block (and its `else`) holds imports for type checkers only.
_TYPE_CHECKING = re.compile(r"^([ \t]*)if TYPE_CHECKING:", re.M)


def crosstrain_imports(source: str) -> Iterator[str]:
    """The crosstrain modules (and names that may be modules) a module's source imports, at import time or in a
    function, outside `if TYPE_CHECKING:`. Read from the lines themselves, not a syntax tree (parsing the node
    side costs a cold `crosstrain render` a tenth of its time); the source is ruff-formatted, and
    tests/test_packaging.py holds this reading to the syntax tree's for every module of the package."""
    source = _LONG_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source)
    skipped = []
    for block in _TYPE_CHECKING.finditer(source):
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


def _names(text: str) -> list[str]:
    """The names of an import's list (`a, b as c`, or in parentheses over lines, with comments)."""
    text = re.sub(r"#[^\n]*", "", text.split(";")[0]).strip().strip("()")
    return [part.split()[0] for part in text.split(",") if part.strip()]
