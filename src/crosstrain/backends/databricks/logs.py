"""The run's state and its driver's logs, read from the cluster log delivery."""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from crosstrain.backends._databricks import WorkspaceFiles, state_of  # shared with the AI Runtime target
from crosstrain.backends.databricks.settings import DBFS_LOG_ROOT, DatabricksSettings
from crosstrain.backends.tail import TailReader

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.service.jobs import Run


#: How the failing rank is named: torchelastic's failure summary (`rank : 1 (local_rank: 1)`), torch's
#: `[rank1]:` prefix on an error line, crosstrain's launcher (`rank(s) 1, 3 of 4 did not finish`).
_RANK_PATTERNS = (
    re.compile(r"^\s*rank\s*:\s*(\d+)\s*\(local_rank"),
    re.compile(r"\[(?:rank|default)(\d+)\]:.*(Error|Exception|Traceback)"),
    re.compile(r"rank\(s\) (\d+)[\d, ]* of \d+ did not finish"),
)


#: torch's prefix on a rank's lines (`[rank1]:`; torchrun's `--tee` writes `[default1]:`).
_RANK_LINE = re.compile(r"\[(?:rank|default)(\d+)\]:")


def _rank_of(line: str) -> int | None:
    found = _RANK_LINE.match(line)
    return int(found[1]) if found else None


def _failing_rank(lines: list[str]) -> int | None:
    """The first failing rank the output names, by the patterns in order of trust."""
    for pattern in _RANK_PATTERNS:
        for line in lines:
            found = pattern.search(line)
            if found:
                return int(found[1])
    return None


def _not_seen(seen: list[str], tail: list[str]) -> list[str]:
    """The lines of `tail` (the end of stdout, from the run output) after those already read from the delivered
    stdout (`seen`, its beginning): the longest end of `seen` that begins `tail` is the overlap."""
    seen = seen[-len(tail) :] if tail else []
    for start in range(len(seen)):  # only where the first line matches: linear for all but repeated lines
        overlap = len(seen) - start
        if seen[start] == tail[0] and all(seen[start + i] == tail[i] for i in range(overlap)):
            return tail[overlap:]
    return tail


DRIVER_PREFIX = "[driver] "
#: The driver's files a cluster delivers under `<destination>/<cluster id>/driver/`, and their line prefixes.
_DRIVER_FILES = (("stdout", DRIVER_PREFIX), ("stderr", "[driver stderr] "))
#: How much of the delivered stdout is kept to compare with the run output's tail (at most 5 MB, by the Jobs API).
_KEPT_STDOUT = 8 * 1024 * 1024


class _DriverLogs:
    """The driver's delivered stdout and stderr, each read from the offset where the last read ended: a line is
    yielded once, whole (a line still being written waits for its newline, unless the run has ended)."""

    def __init__(self, w: WorkspaceClient, folder: str, call: Callable[[Callable[[], Any], str], Any]) -> None:
        self.folder, dbfs = WorkspaceFiles.path(folder)
        self.files = WorkspaceFiles(w, call, dbfs=dbfs)
        self.tail = TailReader(self.files.chunk)
        #: The last stdout lines read (at most `_KEPT_STDOUT` characters), to tell what the run output's tail
        #: adds: that tail is at most the last 5 MB of stdout, so nothing older can overlap it.
        self.kept: collections.deque[str] = collections.deque()
        self.kept_size = 0

    @property
    def stdout(self) -> list[str]:
        return list(self.kept)

    @classmethod
    def of(cls, run: Run, w: WorkspaceClient, call: Callable[[Callable[[], Any], str], Any]) -> _DriverLogs | None:
        """The reader of the run's delivered driver logs; None until its cluster is known, or for a run whose
        cluster delivers no logs to DBFS or a volume."""
        for task in run.tasks or []:
            conf = task.new_cluster.cluster_log_conf if task.new_cluster else None
            place = (conf.volumes or conf.dbfs) if conf else None
            instance = task.cluster_instance or run.cluster_instance
            if place and place.destination and instance and instance.cluster_id:
                return cls(w, f"{place.destination.rstrip('/')}/{instance.cluster_id}/driver", call)
        return None

    def read(self, *, final: bool = False) -> Iterator[str]:
        """Every whole line delivered since the last read, prefixed, stdout's then stderr's."""
        paths = {f"{self.folder}/{name}": (name, prefix) for name, prefix in _DRIVER_FILES}
        for path, line in self.tail.read(((path, self.files.size(path)) for path in paths), final=final):
            name, prefix = paths[path]
            if line is None:
                yield f"[crosstrain: the driver's {name} was rotated; lines in between may be missing]"
                continue
            if name == "stdout":
                self.kept.append(line)
                self.kept_size += len(line) + 1
                while self.kept_size > _KEPT_STDOUT and len(self.kept) > 1:
                    self.kept_size -= len(self.kept.popleft()) + 1
            yield prefix + line


def log_destination(settings: DatabricksSettings, identity: str) -> str:
    """Where the run's cluster delivers its logs: `<volume>/logs/<identity>` with a volume, else
    `dbfs:/crosstrain/logs/<identity>` (the cluster adds `/<cluster id>/driver/stdout`, ...)."""
    return f"{settings.volume}/logs/{identity}" if settings.volume else f"{DBFS_LOG_ROOT}/{identity}"


def log_conf(settings: DatabricksSettings, identity: str) -> dict[str, Any]:
    """The cluster's `cluster_log_conf`: a Unity Catalog volume, else DBFS."""
    kind = "volumes" if settings.volume else "dbfs"
    return {kind: {"destination": log_destination(settings, identity)}}


_state_of = state_of

__all__ = ["WorkspaceFiles", "_state_of"]
