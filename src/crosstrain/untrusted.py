"""Read job files, handles and rendered requests with limits a real one never reaches.

Every limit is checked before the document is built: at most `max_bytes` are read, and a pass over the parser's
events (YAML) or tokens (JSON) counts values, with each alias counted as what it expands to, nesting depth and
string length. So an alias bomb, a deeply nested file, `/dev/zero` or a binary file is refused with a short
message in bounded time and memory, where a plain parser would take gigabytes or crash. Errors are `SpecError`
(exit code 2) and quote at most a short excerpt of the input.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import os
import re
import stat
import sys
import typing
from pathlib import Path
from typing import Any

from crosstrain.errors import Problem, SpecError
from crosstrain.frozen import frozen

KiB = 1024
MiB = 1024 * KiB


@frozen
class Limits:
    """Bounds for one kind of input, far above what a real one holds."""

    what: str  # "job file", "job handle", "rendered request": named in messages
    max_bytes: int
    max_depth: int
    max_nodes: int  # values, keys included; an alias counts as the values it expands to
    max_string: int  # characters in one string (JSON: as written, escapes included)


#: A job file is a few KB of YAML or JSON, nested about 6 levels deep, with well under 1,000 values.
JOB = Limits("job file", max_bytes=1 * MiB, max_depth=64, max_nodes=20_000, max_string=256 * KiB)
#: A handle is one JSON line of well under 1 KB (a local run's holds one entry per rank).
HANDLE = Limits("job handle", max_bytes=256 * KiB, max_depth=32, max_nodes=20_000, max_string=16 * KiB)
#: A rendered request can carry a Databricks upload (at most 10 MB, base64 in the request).
REQUEST = Limits("rendered request", max_bytes=16 * MiB, max_depth=64, max_nodes=100_000, max_string=16 * MiB)
#: This user's config file (`crosstrain.userconfig`): a few tables of settings, a few hundred bytes.
CONFIG = Limits("config file", max_bytes=256 * KiB, max_depth=16, max_nodes=20_000, max_string=64 * KiB)

#: Longest number a YAML or JSON value may spell out; Python refuses ints of more than 4,300 digits, and
#: YAML 1.1's base-60 ints (`1:2:3`) cost quadratic time to build.
MAX_NUMBER = 100
#: How much of an offending input a message quotes.
EXCERPT = 60


def excerpt(value: object, limit: int = EXCERPT) -> str:
    """`repr(value)`, cut to about `limit` characters: messages never echo a whole input."""
    if isinstance(value, str | bytes) and len(value) > 4 * limit:
        value = value[: 2 * limit]  # cut before repr so a 20 MB string is never copied whole
    text = repr(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def display_name(name: str, limit: int = 200) -> str:
    """A file name fit for a message: printable, and cut where a hostile argument is long."""
    text = name.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _refuse(limits: Limits, name: str | None, message: str, fix: str) -> SpecError:
    if limits.what == JOB.what:
        return SpecError([Problem("", message, fix)], source=name)  # "invalid job spec (job.yaml): ... <job>: ..."
    return SpecError([Problem(limits.what.split()[-1], message, fix)], source=name, headline=f"invalid {limits.what}")


# --- reading bytes ---------------------------------------------------------------------------------------


def read_text(source: str | Path, limits: Limits, *, stdin: typing.IO[Any] | None = None) -> tuple[str, str]:
    """The text of a file, or of stdin for `-`, and a name for messages. Reads at most `limits.max_bytes`."""
    if str(source) == "-":
        name = "<stdin>"
        stream = stdin if stdin is not None else sys.stdin
        data: bytes | str = _read_stream(stream, limits)
    else:
        name = display_name(str(source))
        data = _read_path(Path(source), name, limits)
    if isinstance(data, str):  # a text stream handed in from Python (tests, notebooks)
        _check_decoded(data, name, limits)
        return data, name
    return decode(data, name, limits), name


def _too_large(limits: Limits, name: str) -> SpecError:
    return _refuse(
        limits,
        name,
        f"larger than {_size(limits.max_bytes)}, the limit for a {limits.what}",
        f"a {limits.what} is far smaller: check that {name} is the file you meant",
    )


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n // KiB} KiB"


def _read_stream(stream: typing.IO[Any] | None, limits: Limits) -> bytes | str:
    name = "<stdin>"
    try:
        if stream is None:  # Python sets sys.stdin to None when fd 0 is closed (`crosstrain render - <&-`)
            raise ValueError("closed")
        buffer = getattr(stream, "buffer", None)
        data = (buffer if buffer is not None else stream).read(limits.max_bytes + 1)
        if data is None:  # a non-blocking stream with nothing to read
            raise ValueError("nothing to read")
    except ValueError:
        raise _refuse(
            limits, name, "stdin is closed", f"pipe the {limits.what} into crosstrain, or pass a file name instead of -"
        ) from None
    except OSError as exc:
        raise _unreadable(exc, name, limits) from None
    if len(data) > limits.max_bytes:
        raise _too_large(limits, name)
    return typing.cast("bytes | str", data)


def _unreadable(exc: OSError, name: str, limits: Limits) -> SpecError:
    import errno

    reason = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOENT:
        return _refuse(limits, name, f"no such file: {name}", "check the path")
    if exc.errno == errno.EISDIR:
        return _refuse(limits, name, f"{name} is a directory", f"pass the {limits.what} itself, not its folder")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return _refuse(limits, name, f"cannot read {name}: {reason}", "check the file's permissions")
    return _refuse(limits, name, f"cannot read {name}: {reason}", f"pass a readable {limits.what}")


def _read_path(path: Path, name: str, limits: Limits) -> bytes:
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of waiting forever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        if isinstance(exc, ValueError):
            raise _refuse(limits, name, f"no such file: {name}", "check the path") from None
        raise _unreadable(exc, name, limits) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _refuse(limits, name, f"{name} is a directory", f"pass the {limits.what} itself, not its folder")
        if stat.S_ISREG(info.st_mode) and info.st_size > limits.max_bytes:
            raise _too_large(limits, name)
        first = b""
        if stat.S_ISFIFO(info.st_mode):
            try:
                first = os.read(fd, 64 * KiB)
            except BlockingIOError:  # a writer is there but has not written yet: wait for it
                first = b""
            else:
                if not first:
                    raise _refuse(
                        limits,
                        name,
                        f"{name} is a FIFO that nothing is writing to",
                        "start the writer first, or pipe into crosstrain and pass -",
                    )
        os.set_blocking(fd, True)
        with io.FileIO(fd, "rb", closefd=False) as raw:
            data = first + io.BufferedReader(raw).read(limits.max_bytes + 1 - len(first))
    except OSError as exc:
        raise _unreadable(exc, name, limits) from None
    finally:
        os.close(fd)
    if len(data) > limits.max_bytes:
        raise _too_large(limits, name)
    return data


# --- decoding --------------------------------------------------------------------------------------------

_BOMS = (
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE, whose BOM it starts with
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_BE, "utf-16"),
    (codecs.BOM_UTF16_LE, "utf-16"),
)
_SURROGATE = re.compile("[\ud800-\udfff]")


def _encoding(data: bytes) -> str:
    """UTF-8, or UTF-16/32 told by a byte order mark or, without one, by the NULs around an ASCII first
    character (the detection the YAML spec prescribes)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    if len(data) >= 4 and data[:3] == b"\0\0\0":
        return "utf-32-be"
    if len(data) >= 4 and data[1:4] == b"\0\0\0":
        return "utf-32-le"
    if len(data) >= 2 and data[0] == 0:
        return "utf-16-be"
    if len(data) >= 2 and data[1] == 0:
        return "utf-16-le"
    return "utf-8"


def decode(data: bytes, name: str, limits: Limits) -> str:
    """Bytes -> text, refusing what is not text: undecodable bytes, NULs, lone surrogates."""
    encoding = _encoding(data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        bad = data[exc.start : min(exc.end, exc.start + 4)].hex(" ")
        label = encoding.upper().replace("-SIG", "").replace("-BE", "").replace("-LE", "")
        raise _refuse(
            limits,
            name,
            f"not {label} text: bytes {bad} at line {line}, column {column} (byte {exc.start})",
            f"save the {limits.what} as UTF-8; is {name} the file you meant?",
        ) from None
    _check_decoded(text, name, limits)
    return text


def _check_decoded(text: str, name: str, limits: Limits) -> None:
    if len(text) > limits.max_bytes:
        raise _too_large(limits, name)
    nul = text.find("\0")
    surrogate = _SURROGATE.search(text)
    for at, what in ((nul, "a NUL byte"), (surrogate.start() if surrogate else -1, "a lone surrogate")):
        if at >= 0:
            line, column = _line_column(text, at)
            raise _refuse(
                limits,
                name,
                f"{what} at line {line}, column {column}: this is not a text file",
                f"a {limits.what} is UTF-8 text; is {name} the file you meant?",
            )


def _line_column(text: str, at: int) -> tuple[int, int]:
    return text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1


# --- JSON ------------------------------------------------------------------------------------------------

# A string (escapes included), one structural character, or an opening quote that never closes.
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:"]', re.DOTALL)


class NotJSON(ValueError):
    """The text is not JSON at all (for callers where that means 'try another form')."""


def check_json(text: str, limits: Limits, name: str | None) -> None:
    """Count JSON values, depth and string lengths from the tokens, before `json.loads` builds anything."""
    depth = nodes = 0
    for match in _JSON_TOKEN.finditer(text):
        start = match.start()
        char = text[start]
        if char == '"':
            if match.end() - start == 1:
                return  # an unterminated string: json.loads stops there, having built only what was counted
            if match.end() - start - 2 > limits.max_string:
                raise _limit(limits, name, "string", _line_column(text, start), text[start + 1 : start + 41])
            continue
        if char in "[{":
            depth += 1
            if depth > limits.max_depth:
                raise _limit(limits, name, "depth", _line_column(text, start))
        elif char in "]}":
            depth -= 1
            continue
        nodes += 1
        if nodes > limits.max_nodes:
            raise _limit(limits, name, "nodes", _line_column(text, start))


def parse_json(text: str, limits: Limits, name: str | None) -> Any:
    """JSON text -> data within `limits`. Raises `SpecError` past a limit, `NotJSON` if it is not JSON."""
    if len(text) > limits.max_bytes:
        raise _too_large(limits, name or "the input")
    check_json(text, limits, name)
    try:
        data = json.loads(text, parse_int=_json_number(int), parse_float=_json_number(float))
    except RecursionError:  # not reached within max_depth; kept so no input can crash the caller
        raise _limit(limits, name, "depth", (1, 1)) from None
    except ValueError as exc:
        raise NotJSON(str(exc)) from None
    _check_strings(data, limits, name)
    return data


def _json_number(build: type[int] | type[float]) -> typing.Callable[[str], Any]:
    def number(text: str) -> Any:
        if len(text) > MAX_NUMBER:
            raise ValueError(f"a number of {len(text)} characters")
        return build(text)

    return number


def _check_strings(data: Any, limits: Limits, name: str | None) -> None:
    """Refuse lone surrogates anywhere in the data."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and _SURROGATE.search(item):
            raise _lone_surrogate(limits, name, item)


def _lone_surrogate(limits: Limits, name: str | None, text: str, where: str = "") -> SpecError:
    """Valid JSON (`"\\ud800"`), but no text can be printed or sent with one."""
    return _refuse(
        limits,
        name,
        f"a string {where + ' ' if where else ''}holds a lone surrogate (half of a UTF-16 pair): {excerpt(text)}",
        "write the text as UTF-8, or escape a character outside the BMP as a pair (\\ud83d\\ude80)",
    )


# --- YAML ------------------------------------------------------------------------------------------------


def _limit(limits: Limits, name: str | None, kind: str, where: tuple[int, int], sample: str | None = None) -> SpecError:
    at = f"at line {where[0]}, column {where[1]}"
    message, fix = {
        "depth": (
            f"nested more than {limits.max_depth} levels deep {at}",
            f"a {limits.what} needs a handful of levels; check the file's structure",
        ),
        "nodes": (
            f"more than {limits.max_nodes:,} values {at} (an alias counts as all the values it repeats)",
            f"a {limits.what} holds well under 1,000 values; remove what does not belong in it",
        ),
        "string": (
            f"a string longer than {limits.max_string:,} characters {at}"
            + (f", starting {excerpt(sample)}" if sample else ""),
            "keep large data out of the file: point to it (a path, a URI) instead",
        ),
    }[kind]
    return _refuse(limits, name, message, fix)


_CORE_TAGS = frozenset("tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq")) | {"!"}


def check_yaml_events(text: str, limits: Limits, name: str | None) -> None:
    """Walk the parser's events (no document is built) counting values, with each alias counted as what it
    expands to, and nesting depth, string length and tags. Raises `SpecError` at the first limit passed.

    A parser may refuse the text before one of these limits is reached: libyaml looks ahead while scanning,
    and from PyYAML 6.0.4 its scanner stops flow nesting deeper than 1,000 levels before a single event of
    the 65th level is out. Then the text up to the parser's complaint is walked again with PyYAML's own
    parser, which does not look that far, so the user reads crosstrain's limit and fix, as with any other
    parser; a plain syntax error is reported as the parser's."""
    import yaml

    try:
        _walk_events(text, limits, name, _loader_class())
    except yaml.MarkedYAMLError as exc:
        if _loader_class() is _loader_class(pure_python=True) or exc.problem_mark is None:
            raise
        prefix = text[: _offset(text, exc.problem_mark.line, exc.problem_mark.column) + 1]
        with contextlib.suppress(yaml.YAMLError):  # the cut text's own end: the parser's complaint stands
            _walk_events(prefix, limits, name, _loader_class(pure_python=True))
        raise exc from None


def _offset(text: str, line: int, column: int) -> int:
    """The character offset of a parser mark (0-based line and column), never past the end of its line."""
    start = 0
    for _ in range(line):
        start = text.find("\n", start) + 1
        if start == 0:
            return len(text)
    end = text.find("\n", start)
    return min(start + column, len(text) if end < 0 else end)


def _walk_events(text: str, limits: Limits, name: str | None, loader_class: type[Any]) -> None:
    import yaml

    loader = loader_class(text)
    scalar, alias, end = yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionEndEvent
    start = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    try:
        nodes = depth = 0
        sizes: dict[str, int] = {}  # anchor -> how many values its node expands to
        open_nodes: list[tuple[int, str | None]] = []  # collections being read: (values before, anchor)
        while loader.check_event():
            event = loader.get_event()
            kind = type(event)
            if kind is scalar or kind in start:
                nodes += 1
                if event.tag is not None and event.tag not in _CORE_TAGS:
                    raise _refuse(
                        limits,
                        name,
                        f"the tag {excerpt(_short_tag(event.tag), 50)[1:-1]} {_where(event)} is not allowed",
                        f"remove it: a {limits.what} holds plain values (strings, numbers, true/false, null, "
                        "lists and mappings)",
                    )
                if kind is scalar:
                    if len(event.value) > limits.max_string:
                        raise _limit(limits, name, "string", _mark(event), event.value[:40])
                    if _SURROGATE.search(event.value):  # libyaml refuses "\ud800"; PyYAML's own parser reads it
                        raise _lone_surrogate(limits, name, event.value, _where(event))
                    if event.anchor:
                        sizes[event.anchor] = 1
                else:
                    depth += 1
                    if depth > limits.max_depth:
                        raise _limit(limits, name, "depth", _mark(event))
                    open_nodes.append((nodes, event.anchor))
            elif kind is alias:
                anchor = event.anchor or ""
                if any(a == anchor for _, a in open_nodes):
                    raise _refuse(
                        limits,
                        name,
                        f"alias *{excerpt(anchor, 40)[1:-1]} {_where(event)} is inside the node it names "
                        "(a structure that contains itself)",
                        "repeat the values instead of aliasing the node they are part of",
                    )
                nodes += sizes.get(anchor, 1)  # an undefined alias is reported by the parser later
            elif issubclass(kind, end):
                before, closed = open_nodes.pop()
                depth -= 1
                if closed:
                    sizes[closed] = nodes - before + 1
            if nodes > limits.max_nodes:
                raise _limit(limits, name, "nodes", _mark(event))
    finally:
        loader.dispose()


def _mark(event: Any) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _where(event: Any) -> str:
    return _where_text(_mark(event))


def _where_text(where: tuple[int, int]) -> str:
    return f"at line {where[0]}, column {where[1]}"


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def parse_yaml(text: str, limits: Limits, name: str | None) -> Any:
    """YAML (or JSON) text -> data within `limits`; every error is a `SpecError` with line and column."""
    import yaml

    if len(text) > limits.max_bytes:
        raise _too_large(limits, name or "the input")
    try:
        check_yaml_events(text, limits, name)
        return yaml.load(text, Loader=_loader_class())
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a control character)
        line, column = _line_column(text, exc.position)
        raise _refuse(
            limits,
            name,
            f"the character U+{exc.character:04X} at line {line}, column {column} is not allowed"
            if isinstance(exc.character, int)
            else f"not valid YAML or JSON at line {line}, column {column}: {cut(str(exc.reason), 200)}",
            f"a {limits.what} is text: remove the control characters; is {name} the file you meant?",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        what = f"{context}, {problem}" if context and problem != str(exc) else str(problem)
        raise _refuse(limits, name, f"not valid YAML or JSON{where}: {cut(what, 200)}", "fix the syntax") from None


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_LOADERS: dict[type[Any], type[Any]] = {}  # by base loader: libyaml's or PyYAML's own


def _loader_class(pure_python: bool = False) -> type[Any]:
    """PyYAML's safe loader (libyaml's parser where installed, unless `pure_python`), with three changes for
    job files: dates stay strings (JSON has no dates, and no field takes one), and numbers longer than
    `MAX_NUMBER` characters and tags other than the core ones are refused."""
    import yaml

    base: type[yaml.SafeLoader] = yaml.SafeLoader if pure_python else getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    if base in _LOADERS:
        return _LOADERS[base]
    from yaml.constructor import ConstructorError

    class JobLoader(base):  # type: ignore[valid-type,misc]
        yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }

        def _bounded_number(self, node: Any, build: Any) -> Any:
            if len(node.value) > MAX_NUMBER:
                raise ConstructorError(
                    None, None, f"a number of {len(node.value)} characters (quote it if it is text)", node.start_mark
                )
            return build(self, node)

    JobLoader.yaml_constructors = dict(base.yaml_constructors)
    for tag, build in (
        ("tag:yaml.org,2002:int", base.construct_yaml_int),
        ("tag:yaml.org,2002:float", base.construct_yaml_float),
    ):
        JobLoader.yaml_constructors[tag] = lambda self, node, build=build: self._bounded_number(node, build)
    # Only the core tags are built; anything else (!!binary, !!set, !!python/...) is refused.
    for tag in list(JobLoader.yaml_constructors):
        if tag is not None and tag not in _CORE_TAGS:
            del JobLoader.yaml_constructors[tag]
    _LOADERS[base] = JobLoader
    return JobLoader
