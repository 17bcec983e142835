"""Remote log files read as they grow: one reader for every platform that keeps a job's logs as files (Azure ML's
`user_logs/`, a Databricks cluster's delivered driver logs).

Each file is read from where the last read ended, in chunks of at most `CHUNK` bytes, so a read costs what the
file grew by, in time and memory. A whole line is yielded once; a line still being written waits for its newline
unless the job has ended (`final`); a line longer than `MAX_LINE` bytes is yielded in pieces of that size, so a
file with no newline cannot grow the reader without bound. A file shorter than where the last read ended was
rotated (it starts again): its new content is read from the start, and the gap is said (a `None` line).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

#: The most bytes one range read asks for.
CHUNK = 1024 * 1024
#: The longest line kept whole; a longer one comes in pieces of this size.
MAX_LINE = 64 * 1024


class TailReader:
    """`chunk(name, start, end)` returns bytes `start` to `end` of the file `name` (fewer where it has fewer)."""

    def __init__(self, chunk: Callable[[str, int, int], bytes]) -> None:
        self.chunk = chunk
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}

    def read(self, files: Iterable[tuple[str, int | None]], *, final: bool = False) -> Iterator[tuple[str, str | None]]:
        """(file, line) for every line written since the last read of each `(file, size)` (None: no such file
        yet), in the order given; (file, None) where the file was rotated."""
        for name, size in files:
            start = self.offsets.get(name, 0)
            if size is not None and size < start:
                yield name, None
                start, self.partial[name] = 0, b""
            while size is not None and start < size:
                data = self.chunk(name, start, min(size, start + CHUNK))
                if not data:
                    break
                start += len(data)
                yield from self._lines(name, data)
            self.offsets[name] = start
            if final and self.partial.get(name):
                yield name, _text(self.partial.pop(name))

    def _lines(self, name: str, data: bytes) -> Iterator[tuple[str, str | None]]:
        *lines, rest = (self.partial.pop(name, b"") + data).split(b"\n")
        for line in lines:
            yield name, _text(line)
        while len(rest) > MAX_LINE:
            yield name, _text(rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        self.partial[name] = rest


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace").rstrip("\r")
