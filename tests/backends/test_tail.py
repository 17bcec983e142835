"""The one reader of remote log files: each line once, in bounded chunks and bounded memory, rotation said."""

from __future__ import annotations

from crosstrain.backends.tail import CHUNK, MAX_LINE, TailReader


class Files:
    """Files that grow, read by byte range as a blob store or the Databricks Files API serves them."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.reads: list[tuple[str, int, int]] = []

    def chunk(self, name: str, start: int, end: int) -> bytes:
        self.reads.append((name, start, end))
        return self.data[name][start:end]

    def sizes(self) -> list[tuple[str, int | None]]:
        return [(name, len(data)) for name, data in sorted(self.data.items())]


def test_each_whole_line_comes_once_and_a_half_written_one_waits_until_the_end() -> None:
    files = Files()
    reader = TailReader(files.chunk)
    files.data["a"] = b"one\ntw"
    assert list(reader.read(files.sizes())) == [("a", "one")]
    files.data["a"] += b"o\r\nthree"
    assert list(reader.read(files.sizes())) == [("a", "two")]
    assert list(reader.read(files.sizes())) == []  # nothing new: nothing read
    assert list(reader.read([*files.sizes(), ("b", None)], final=True)) == [("a", "three")]


def test_a_big_file_is_read_in_chunks_and_a_line_without_end_in_bounded_pieces() -> None:
    files = Files()
    reader = TailReader(files.chunk)
    files.data["a"] = b"x" * (3 * CHUNK + 5)  # a log with no newline at all
    pieces = list(reader.read(files.sizes()))
    assert all(end - start <= CHUNK for _, start, end in files.reads)
    assert len(files.reads) == 4  # each byte read once
    assert all(len(line or "") == MAX_LINE for _, line in pieces)
    assert len(reader.partial["a"]) <= MAX_LINE  # what waits for a newline stays small
    rest = list(reader.read(files.sizes(), final=True))
    assert sum(len(line or "") for _, line in pieces + rest) == 3 * CHUNK + 5  # nothing lost


def test_a_rotated_file_is_said_and_read_from_its_start() -> None:
    files = Files()
    reader = TailReader(files.chunk)
    files.data["a"] = b"old 1\nold 2\n"
    assert [line for _, line in reader.read(files.sizes())] == ["old 1", "old 2"]
    files.data["a"] = b"new\n"
    assert list(reader.read(files.sizes())) == [("a", None), ("a", "new")]
