"""What a code folder leaves out: git's ignore rules, read where git reads them, then crosstrain's own files.

A folder ships what `git ls-files --cached --others --exclude-standard` lists in it, tracked or not, so a file
that git ignores is not uploaded wherever `code:` points inside the repository. The rules are read as git
reads them:

* every `.gitignore` from the root of the repository that holds the folder down to the folder and inside it,
  each one's patterns relative to its own folder, a deeper one overriding those above it;
* the repository's `.git/info/exclude` (a worktree's or a submodule's, through its `.git` file), below them;
* a UTF-8 byte-order mark and a `\\r` before each line end are dropped, a symlinked ignore file is not read.

Not read: git's `core.excludesFile` (e.g. `~/.config/git/ignore`), one user's setting, so the same folder gives
the same bundle on every machine. Outside a repository, the folder's own `.gitignore` files still apply.

The extra files at the folder's root (`.crosstrainignore`; `.amlignore` too on Azure ML) apply after git's: they
leave more out, and a `!pattern` there brings back what git's rules left out. `.git` itself never ships.

Each pattern is read as git's wildmatch reads it (`pattern_regex`) and matched against one path exactly, as git
matches it (a trailing `/` makes it match folders only), both as bytes (`?` is one byte of a UTF-8 name); a
folder left out is not entered, so nothing under it can come back, which is git's rule too. Each is held to git's
own listing by random trees and patterns in the tests.

A folder a platform uploads as data (`own_rules`) is read by its own ignore files only, at its root, as azure-ai-ml
reads a local input: data is what a repository's `.gitignore` most often leaves out, and a job that names a folder
as its data means all of it.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import functools
import itertools
import os
import re
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.uploads import UploadRefused

#: The most of an ignore file that is read: no real one comes near.
MAX_BYTES = 1 << 20
#: Never shipped, whatever the rules say: a repository's history.
ALWAYS_IGNORED = ".git"


#: The paths the rules were read from (or looked for), while `recording()`: what a listing depends on.
_RECORD: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("ignores_record", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[str]]:
    """Every path read or looked for by the rules made inside: ignore files, `.git` and the files it points to."""
    consulted: list[str] = []
    token = _RECORD.set(consulted)
    try:
        yield consulted
    finally:
        _RECORD.reset(token)


def note(path: str) -> None:
    """Notes `path` as read (or looked for) by what is being recorded."""
    record = _RECORD.get()
    if record is not None:
        record.append(path)


def stamp(path: str) -> tuple[int, ...] | None:
    """What a listing relies on about `path`: its type, inode, size and mtime, and its target's where it is a
    link; None where there is nothing there."""
    try:
        link = os.lstat(path)
    except OSError:
        return None
    try:
        info = os.stat(path) if stat.S_ISLNK(link.st_mode) else link
    except OSError:
        info = link
    return (link.st_mode, link.st_ino, link.st_mtime_ns, info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns)


@frozen
class Rules:
    """The patterns of one ignore file, for paths relative to the code folder."""

    #: The file, relative to the code folder (`../.gitignore` for one above it).
    source: str
    #: Makes a code-folder path relative to the file's folder: this prefix added ...
    prefix: str
    #: ... after this many leading characters are removed (a nested file's folder).
    strip: int
    #: (regex, folders only, whether a match ignores), the last pattern first: the last match wins.
    patterns: tuple[tuple[re.Pattern[str], bool, bool], ...]

    def decides(self, rel: str, is_dir: bool) -> bool | None:
        """True where the file leaves `rel` out, False where a `!pattern` keeps it, None where none matches."""
        path = self.prefix + rel[self.strip :]
        if not path.isascii():  # git matches bytes: `?` is one byte of a UTF-8 name, as the patterns are read
            path = os.fsencode(path).decode("latin-1")
        for regex, dirs_only, ignores in self.patterns:
            if (is_dir or not dirs_only) and regex.search(path):
                return ignores
        return None


@frozen
class Ignores:
    """The rules that apply in one folder of the walk, the first to decide first."""

    extra: tuple[Rules, ...]  # the extra files, the last listed first
    git: tuple[Rules, ...]  # the .gitignore files of this folder and those above it, the deepest first
    exclude: tuple[Rules, ...]  # the repository's info/exclude, if it holds a pattern
    #: Whether a folder's own .gitignore adds to the rules inside it (git's way); False: the root's rules only.
    nested: bool = True

    def leaves_out(self, rel: str, is_dir: bool) -> str | None:
        """The ignore file that leaves `rel` (relative to the code folder, a folder's without a trailing `/`) out,
        `ALWAYS_IGNORED` for `.git`, or None where it ships."""
        if rel.rsplit("/", 1)[-1] == ALWAYS_IGNORED:
            return ALWAYS_IGNORED
        for rules in (*self.extra, *self.git, *self.exclude):
            decided = rules.decides(rel, is_dir)
            if decided is not None:
                return rules.source if decided else None
        return None

    def entering(self, path: str, rel: str) -> Ignores:
        """The rules inside the folder `path` (`rel/` relative to the code folder): its .gitignore added."""
        if not self.nested:
            return self
        rules = read_rules(os.path.join(path, ".gitignore"), f"{rel}.gitignore", "", len(rel))
        return self if rules is None else Ignores(self.extra, (rules, *self.git), self.exclude)


def for_folder(folder: Path, extra_files: Sequence[str]) -> Ignores:
    """The rules at the root of `folder` (absolute): git's, from its repository down, then `extra_files`."""
    extra = []
    for name in extra_files:
        rules = read_rules(str(folder / name), name, "", 0)
        if rules is not None:
            extra.append(rules)
    git: list[Rules] = []
    exclude: list[Rules] = []
    repository = _repository(folder)
    if repository is not None:
        top, common = repository
        for above in reversed(folder.relative_to(top).parents):  # the repository's root first
            base = top / above
            shown = os.path.relpath(base / ".gitignore", folder)
            rules = read_rules(str(base / ".gitignore"), shown, _prefix(folder, base), 0)
            if rules is not None:
                git.insert(0, rules)
        if common is not None:
            info = common / "info" / "exclude"
            rules = read_rules(str(info), os.path.relpath(info, folder), _prefix(folder, top), 0)
            if rules is not None:
                exclude.append(rules)
    return Ignores(tuple(reversed(extra)), tuple(git), tuple(exclude)).entering(str(folder), "")


def own_rules(folder: Path, names: Sequence[str]) -> Ignores:
    """The rules of `folder`'s own ignore files at its root, for everything under it, and no other file's (not its
    repository's, not one in a folder below): each of `names`, where `a|b` is the first of `a` and `b` that exists,
    as azure-ai-ml reads a folder it uploads (its `.amlignore`, else its `.gitignore`). The last listed decides
    first; `.git` never ships."""
    extra = []
    for entry in names:
        for name in entry.split("|"):
            if os.path.exists(folder / name):  # the SDK's `IgnoreFile.exists`: an empty one still stands
                rules = read_rules(str(folder / name), name, "", 0)
                if rules is not None:
                    extra.append(rules)
                break
    return Ignores(tuple(reversed(extra)), (), (), nested=False)


def _prefix(folder: Path, base: Path) -> str:
    """What makes a path relative to `folder` relative to `base`, a folder that holds it."""
    inside = folder.relative_to(base).as_posix()
    return "" if inside == "." else f"{inside}/"


def _repository(folder: Path) -> tuple[Path, Path | None] | None:
    """The work tree that holds `folder` (absolute) and the git folder whose `info/exclude` applies (None where
    its `.git` file names none): the nearest folder upwards with a `.git` folder or file."""
    for top in (folder, *folder.parents):
        dot = top / ".git"
        note(str(dot))
        if dot.is_dir():
            return top, dot
        if dot.is_file():
            return top, _git_folder(dot)
    return None


def _git_folder(dot: Path) -> Path | None:
    """The common git folder a `.git` file points to (`gitdir: PATH`, then its `commondir` for a worktree)."""
    try:
        text = dot.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return None
    if not text.startswith("gitdir:"):
        return None
    gitdir = dot.parent / text.removeprefix("gitdir:").strip()
    note(str(gitdir / "commondir"))
    try:
        common = (gitdir / "commondir").read_text(encoding="utf-8", errors="surrogateescape").strip()
    except OSError:
        return gitdir
    return gitdir / common


def read_rules(path: str, source: str, prefix: str, strip: int) -> Rules | None:
    """The patterns of the ignore file at `path`, or None where there is none (no file, a symlink, a folder)
    or it holds no pattern. A file that cannot be read is refused: what it would leave out might be a secret."""
    note(path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # none, or a symlink (git does not follow it)
            return None
        raise unreadable(path, f"code: {source}", exc) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_BYTES)
    except OSError as exc:
        raise unreadable(path, f"code: {source}", exc) from None
    finally:
        os.close(fd)
    patterns = _compiled_text(data)
    return Rules(source, prefix, strip, patterns) if patterns else None


@functools.lru_cache(maxsize=256)
def _compiled_text(data: bytes) -> tuple[tuple[re.Pattern[str], bool, bool], ...]:
    """The patterns of an ignore file's bytes, compiled once per process for the same bytes. Each byte is read as
    one character (latin-1), as git reads patterns and paths, and paths are matched as their bytes too."""
    return compile_lines(data.removeprefix(b"\xef\xbb\xbf").decode("latin-1").split("\n"))


def compile_lines(lines: Sequence[str]) -> tuple[tuple[re.Pattern[str], bool, bool], ...]:
    """The patterns of an ignore file's lines, the last first. A pattern git cannot read (a lone `!`, a
    trailing `\\`, an unclosed `[`) never matches there, so it is dropped here."""
    compiled = []
    for raw in lines:
        line = _trim(raw.removesuffix("\r"))
        if not line or line.startswith("#"):
            continue
        include = not line.startswith("!")
        pattern = line if include else line[1:]
        dirs_only = len(pattern) > 1 and pattern.endswith("/")
        regex = pattern_regex(pattern[:-1] if dirs_only else pattern)
        if regex is not None:
            compiled.append((re.compile(regex), dirs_only, include))
    return tuple(reversed(compiled))


def _trim(line: str) -> str:
    """`line` less its trailing spaces, but for one escaped by a backslash (git's `trim_trailing_spaces`)."""
    trimmed = line.rstrip(" ")
    if trimmed != line and trimmed.endswith("\\") and (len(trimmed) - len(trimmed.rstrip("\\"))) % 2:
        return f"{trimmed} "
    return trimmed


def pattern_regex(pattern: str) -> str | None:
    """A gitignore pattern (less its `!` and the trailing `/` of a folders-only one) as git reads it: a regular
    expression for one path relative to the ignore file's folder; None where git matches nothing with it.

    Without a `/` it matches a name at any depth; with one, the path from the file's folder. `*`, `?` and `[...]`
    never match a `/`; a segment of `**` alone matches any number of folders (none included), at the end
    everything below; a `\\` takes the next character as it is (git's wildmatch with `WM_PATHNAME`). And as git
    compares the text before a pattern's first wildcard on its own and matches the rest as a pattern of its own,
    a `**` right after that text is read as a segment of `**` even inside a name (`/a**/b` matches `a/b`, `ax/b`
    and `ax/y/b`, as git does, though its documentation reads it as `/a*/b`)."""
    pattern, some = _unescaped_slashes(pattern)
    segments = _segments(pattern, some) if pattern else None
    if segments is None:
        return None
    names = itertools.count()  # each group's, to take what it matched: the expression's own
    if "/" not in pattern:
        parts = _body(segments, names)
        return None if parts is None else rf"(?s)^(?:.*/)?{_joined(parts, names)}\Z"  # a name may hold a line break
    if pattern.startswith("/"):
        pattern, some = pattern[1:], {at - 1 for at in some}
    wild = next((i for i, char in enumerate(pattern) if char in "*?[\\"), len(pattern))
    stars = len(pattern[wild:]) - len(pattern[wild:].lstrip("*"))
    after = wild + stars
    if stars >= 2 and (after == len(pattern) or pattern[after] == "/"):
        head = re.escape(pattern[:wild])
        if after == len(pattern):
            parts = [head, ".*"]
        else:
            tail = _body(_segments(pattern[after + 1 :], {at - after - 1 for at in some}) or [], names)
            parts = None if tail is None else [head, _SOME_FOLDERS if after in some else _ANY_FOLDERS, *tail]
    else:
        parts = _body(_segments(pattern, some) or [], names)
    return None if parts is None else rf"(?s)^{_joined(parts, names)}\Z"


def _unescaped_slashes(pattern: str) -> tuple[str, set[int]]:
    """`pattern` with each `\\/` a `/`, as git's wildmatch matches it and reads a `**` beside it as between two
    folders (but at the start, where `\\/` is no leading `/` to drop); and where each `/` that was escaped right
    after a `**` is: git's wildmatch tries no folder there only before a plain `/`, so `**\\/` is one or more."""
    out: list[str] = []
    some: set[int] = set()
    length = i = 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            if pattern[i + 1] == "/" and i:
                if out[-2:] == ["*", "*"]:  # two stars, not escaped, right before
                    some.add(length)
                piece = "/"
            else:
                piece = pattern[i : i + 2]
            i += 2
        else:
            piece = pattern[i]
            i += 1
        out.append(piece)
        length += len(piece)
    return "".join(out), some


#: A place of any depth: any number of folders, none included (`**/`), or one or more (`**\/`).
_ANY_FOLDERS, _SOME_FOLDERS = 0, 1


def _body(segments: list[tuple[str, bool]], names: Iterator[int]) -> list[str | int] | None:
    """A pattern's segments (the first at the start of a path or after a `/`), each with whether the `/` after it
    was escaped right after a `**`, as parts of a regular expression: `_ANY_FOLDERS` or `_SOME_FOLDERS` for each
    place of any depth."""
    parts: list[str | int] = []
    for i, (segment, some) in enumerate(segments):
        if _ANY_DEPTH.fullmatch(segment):
            if i and _ANY_DEPTH.fullmatch(segments[i - 1][0]):
                if some and parts and parts[-1] == _ANY_FOLDERS:
                    parts[-1] = _SOME_FOLDERS
                continue  # `a/**/**/b` is `a/**/b`
            if all(_ANY_DEPTH.fullmatch(rest) for rest, _ in segments[i:]):
                # at the start: any path (and after `a**/`, `a` too); a `**\/` on the way wants one more folder
                below = ".*/.*" if any(some for _, some in segments[i:-1]) else ".*"
                parts.append(below if not i else f"/{below}")
            else:
                gap = _SOME_FOLDERS if some else _ANY_FOLDERS
                parts += [gap] if not i else ["/", gap]
            continue
        glob = _segment_regex(segment, names)
        if glob is None:
            return None
        parts.append(glob if not i or _ANY_DEPTH.fullmatch(segments[i - 1][0]) else f"/{glob}")
    return parts


def _joined(parts: list[str | int], names: Iterator[int]) -> str:
    """The parts as one expression that takes time linear in the folders a path has per `**`: each place of
    any depth but the last, with what follows it up to the next one, is matched once, at its first fit
    (`_first_fit`), as a later fit would leave the next `**` less to match; backtracking over every way to share
    the folders out made `**/a/**/a/**/a/**/c` take minutes over a deep path."""
    gaps = [k for k, part in enumerate(parts) if isinstance(part, int)]
    out: list[str] = []
    k = 0
    while k < len(parts):
        part = parts[k]
        if isinstance(part, int) and k != gaps[-1]:
            following = next(gap for gap in gaps if gap > k)
            chunk = "".join(p for p in parts[k + 1 : following] if isinstance(p, str))
            out.append(_first_fit((".*?/" if part == _SOME_FOLDERS else "(?:.*?/)??") + chunk, names))
            k = following
            continue
        out.append((".*/" if part == _SOME_FOLDERS else "(?:.*/)?") if isinstance(part, int) else part)
        k += 1
    return "".join(out)


def _first_fit(body: str, names: Iterator[int]) -> str:
    """`body` matched once, where it first fits, and never tried again: an atomic group, written as a lookahead
    (which Python never backtracks into) that captures, then a reference that takes what it captured (Python 3.10
    has no `(?>...)`)."""
    name = f"a{next(names)}"
    return f"(?=(?P<{name}>{body}))(?P={name})"


def _segments(pattern: str, some: set[int]) -> list[tuple[str, bool]] | None:
    """`pattern` cut at each `/` outside a bracket (git reads `[/*.py/[!a]` as one bracket, which may not match a
    `/` but holds two), each segment with whether the `/` after it is one of `some`; None where a bracket does not
    close (git matches nothing with it)."""
    segments, start, i = [], 0, 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 1
        elif pattern[i] == "[":
            bracket = _bracket(pattern, i)
            if bracket is None:
                return None
            i = bracket[1]
        elif pattern[i] == "/":
            segments.append((pattern[start:i], i in some))
            start = i + 1
        i += 1
    return [*segments, (pattern[start:], False)]


#: A segment of only asterisks, two or more: any number of folders (git: `**` between slashes).
_ANY_DEPTH = re.compile(r"\*\*+")
#: The POSIX classes git's brackets know (`[[:digit:]]`), over ASCII as git reads a path's bytes.
_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": re.escape("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": " \\t\\n\\r",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


def _segment_regex(segment: str, names: Iterator[int]) -> str | None:
    """One segment of a pattern (no `/`): `*` any run of characters, `?` one, `[...]` one of a set, `\\x` x itself;
    None where git aborts the match (a trailing `\\`, an unclosed bracket, an unknown class)."""
    pieces: list[list[str]] = [[]]  # the text between one run of `*` and the next
    i = 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            while i + 1 < len(segment) and segment[i + 1] == "*":
                i += 1
            pieces.append([])
        elif char == "?":
            pieces[-1].append("[^/]")
        elif char == "\\":
            if i + 1 == len(segment):
                return None
            i += 1
            pieces[-1].append(re.escape(segment[i]))
        elif char == "[":
            bracket = _bracket(segment, i)
            if bracket is None:
                return None
            regex, i = bracket
            pieces[-1].append(regex)
        else:
            pieces[-1].append(re.escape(char))
        i += 1
    if len(pieces) == 1:
        return "".join(pieces[0])
    # each piece between two stars at its first fit (an atomic group): as fnmatch does, so that `*a*a*a*a*c`
    # takes time linear in a long name, not exponential (each piece matches a fixed number of characters)
    middle = "".join(_first_fit(f"[^/]*?{''.join(piece)}", names) for piece in pieces[1:-1])
    return "".join(pieces[0]) + middle + "[^/]*" + "".join(pieces[-1])


def _bracket(segment: str, start: int) -> tuple[str, int] | None:
    """The bracket expression opening at `segment[start]`: (its regex, where its `]` is); None where it does not
    close or names an unknown class. `!` or `^` first negates it; a `]` first is a member; never a `/`."""
    i = start + 1
    negated = i < len(segment) and segment[i] in "!^"
    i += negated
    members: list[str] = []
    first = True
    while i < len(segment) and (segment[i] != "]" or first):
        first = False
        if segment.startswith("[:", i):  # `[:name:]` up to the next `]`; without its `:]`, a plain `[`
            end = segment.find("]", i + 2)
            if end < 0:
                return None
            if end - 1 >= i + 2 and segment[end - 1] == ":":
                if segment[i + 2 : end - 1] not in _CLASSES:
                    return None
                members.append(_CLASSES[segment[i + 2 : end - 1]])
                i = end + 1
                continue
        low, i = _member(segment, i)
        if low is None:
            return None
        if i + 1 < len(segment) and segment[i] == "-" and segment[i + 1] != "]":
            high, i = _member(segment, i + 1)
            if high is None:
                return None
            # a range backwards matches its first character only, as git reads it
            members.append(f"{re.escape(low)}-{re.escape(high)}" if low <= high else re.escape(low))
            continue
        members.append(re.escape(low))
    if i >= len(segment):
        return None
    body = "".join(members)
    if negated:
        return f"[^/{body}]", i
    return (f"(?!/)[{body}]" if body else "(?!)"), i


def _member(segment: str, i: int) -> tuple[str | None, int]:
    """The character at `segment[i]` in a bracket (`\\x` is x) and where the next one starts."""
    if segment[i] == "\\":
        return (segment[i + 1], i + 2) if i + 1 < len(segment) else (None, i + 1)
    return segment[i], i + 1


def unreadable(path: str, field: str, exc: OSError) -> UploadRefused:
    """An OS error reading `path` for the code bundle, as a refusal that names it and says what to do."""
    shown = path if len(path) <= 200 else f"{path[:80]}...{path[-100:]}"
    fixes = {
        errno.EACCES: "make it readable (chmod u+r), or leave it out with a pattern in .crosstrainignore",
        errno.EPERM: "make it readable, or leave it out with a pattern in .crosstrainignore",
        errno.ENAMETOOLONG: "use a shorter path (a folder nearer the job file, shorter folder names)",
        errno.ENOENT: "it was removed while the folder was packaged: submit again once the folder is stable",
        errno.ELOOP: "remove the symlink loop",
    }
    return UploadRefused(
        Problem(field, f"cannot read {shown}: {exc.strerror or exc}", fixes.get(exc.errno or 0, "check the path"))
    )
