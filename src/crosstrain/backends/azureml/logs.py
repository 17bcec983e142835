"""The job's log files, read from the workspace's artifact store (every rank's, where the SDK streams rank 0's)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors import azure
from crosstrain.backends.tail import TailReader

if TYPE_CHECKING:
    from crosstrain.retry import RetryPolicy


#: The settings that name the workspace, as a handle keeps them.
WORKSPACE_KEYS = ("subscription_id", "resource_group", "workspace")


#: The log files `MLClient.jobs.stream` reads (azure-ai-ml's `COMMON_RUNTIME_ALL_USER_LOG_PATTERN`; it streams
#: only rank 0's, crosstrain every rank's): `user_logs/std_log.txt`, `user_logs/std_log_process_N.txt`, ...
_LOG_FILE = re.compile(r"(^|/)user_logs/std_log[^/]*\.txt$")
_LOG_NODE = re.compile(r"node_(\d+)")
_LOG_RANK = re.compile(r"process_(\d+)")
#: A line that says a process failed (how the failing rank's log is told from the others).
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b:|\bKilled\b|exit(ed)? (with )?code",
    re.I,
)


def _log_numbers(name: str) -> tuple[int, int]:
    base = name.rsplit("/", 1)[-1]
    node, rank = _LOG_NODE.search(base), _LOG_RANK.search(base)
    return (int(node[1]) if node else -1, int(rank[1]) if rank else -1)


def _log_who(name: str) -> str:
    """`rank N` (`node N rank M`) as the log file's name tells it; empty for a file that names neither."""
    node, rank = _log_numbers(name)
    parts = ([f"node {node}"] if node >= 0 else []) + ([f"rank {rank}"] if rank >= 0 else [])
    return " ".join(parts)


def _log_prefix(name: str) -> str:
    who = _log_who(name)
    return f"[{who}] " if who else ""


class _LogReader:
    """A job's log blobs, each read from the offset where the last read ended: a line is yielded once, whole
    (a line still being written waits for its newline, unless the job has ended)."""

    def __init__(self, container: Any, prefix: str, retry: RetryPolicy) -> None:
        self.container = container
        self.prefix = f"{prefix}/user_logs/" if prefix else "user_logs/"
        self.retry = retry
        self.tail = TailReader(self._chunk)

    def _sizes(self) -> list[tuple[str, int | None]]:
        what = f"list the logs under {self.prefix}"

        def listing() -> list[tuple[str, int | None]]:
            blobs = self.container.list_blobs(name_starts_with=self.prefix)
            return [(str(b.name), int(b.size or 0)) for b in blobs if _LOG_FILE.search(str(b.name))]

        found = self.retry.poll(lambda: azure.call(listing, what))
        return sorted(found, key=lambda item: (*_log_numbers(item[0]), item[0]))

    def _chunk(self, name: str, start: int, end: int) -> bytes:
        what = f"read log {name}"

        def download() -> bytes:
            return bytes(self.container.download_blob(name, offset=start, length=end - start).readall())

        return self.retry.poll(lambda: azure.call(download, what))

    def read(self, *, final: bool = False) -> Iterator[tuple[str, str]]:
        """(file, line) for every whole line written since the last read, file by file in rank order."""
        for name, line in self.tail.read(self._sizes(), final=final):
            yield name, line if line is not None else "[crosstrain: this log started again; lines may be missing]"
