"""Every node's log lines, each prefixed with its node: from AI Runtime's per-node logs endpoint
(`GET /api/2.0/ai-training/workflows/by-run-id/{run_id}/logs`, which the `databricks air` CLI reads with a raw
client: the SDK does not model it), which answers
`{"log_records": [{"time_unix_nano", "body", "node_index"}], "next_page_token"}`, oldest first, by pages; where
the workspace does not serve it, from the run's MLflow artifacts, as the CLI falls back: the files
`logs/attempt_<n>/node_<k>/logs-<i>.chunk.txt` (older runs: `logs/node_<k>/...`), each read through the signed
URL `GET /api/2.0/mlflow/artifacts/credentials-for-read` gives (with its headers, never the workspace's token)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors.http import error_for_status

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

#: The most records one page asks for.
PAGE_SIZE = 1000
#: How far back each read starts before the newest record seen: a node's lines may reach the service later than
#: another's newer ones, and those are read (once) if they come within this many seconds.
LATE_SECONDS = 120
#: Said once where the workspace serves neither the endpoint nor the MLflow artifacts.
NOT_SERVED = (
    "[crosstrain: this workspace does not serve AI Runtime's per-node logs (FEATURE_DISABLED or not found), and "
    "the run's MLflow artifacts hold no logs/ yet; see the run's page]"
)
#: The most bytes read of one log file (a chunk); past it, a marker line says the rest was left out.
MAX_CHUNK = 64 * 1024 * 1024
_ATTEMPT = re.compile(r"attempt_(\d+)")
_NODE = re.compile(r"node_(\d+)")
_CHUNK = re.compile(r"logs-(\d+)\.chunk\.txt")


class NodeLogs:
    """Reads every node's records from where the last read ended: a record is yielded once (each read starts
    `LATE_SECONDS` before the newest record seen, and leaves out what was read before)."""

    def __init__(self, w: WorkspaceClient, run_id: int, call: Callable[[Callable[[], Any], str], Any]) -> None:
        self.w, self.run_id, self.call = w, run_id, call
        self.last_ns = 0
        self.seen: set[tuple[int, int, str]] = set()  # the records read within the window, by time, node and body
        self.served = True

    def _page(self, since_s: int, token: str | None) -> dict[str, Any] | None:
        from crosstrain.adaptors import databricks as adaptor

        query: dict[str, Any] = {"ascending": "true", "page_size": PAGE_SIZE}
        if since_s:
            query["from"] = since_s
        if token:
            query["page_token"] = token
        path = f"/api/2.0/ai-training/workflows/by-run-id/{self.run_id}/logs"
        do = partial(self.w.api_client.do, "GET", path, query=query, headers={"Accept": "application/json"})
        answer = self.call(partial(adaptor.served_or_none, do), f"ai-training logs of run {self.run_id}")
        return answer if isinstance(answer, dict) or answer is None else {}

    def read(self) -> Iterator[str]:
        if not self.served:
            return
        token: str | None = None
        since = max(0, self.last_ns // 1_000_000_000 - LATE_SECONDS)
        while True:
            page = self._page(since, token)
            if page is None:
                self.served = False
                return
            for record in page.get("log_records") or []:
                yield from self._lines(record)
            token = page.get("next_page_token") or None
            if not token:
                break
        window = self.last_ns - LATE_SECONDS * 1_000_000_000  # what no later read asks for again
        self.seen = {key for key in self.seen if key[0] >= window}

    def _lines(self, record: dict[str, Any]) -> Iterator[str]:
        at, node, body = int(record.get("time_unix_nano") or 0), int(record.get("node_index") or 0), record.get("body")
        key = (at, node, str(body))
        if key in self.seen:
            return  # read before
        self.seen.add(key)
        self.last_ns = max(self.last_ns, at)
        for line in str(body or "").rstrip("\n").split("\n"):
            yield f"[node{node}] {line}"


class ArtifactLogs:
    """Every node's lines from the run's MLflow artifacts, each file read from where the last read of it ended
    (a node's lines whole: a line cut at the end of what was written so far waits for its end, or for the
    run's)."""

    def __init__(
        self,
        w: WorkspaceClient,
        mlflow_run: Callable[[], str | None],
        call: Callable[[Callable[[], Any], str], Any],
        timeout: float,
    ) -> None:
        self.w, self.mlflow_run, self.call, self.timeout = w, mlflow_run, call, timeout
        self.run_id: str | None = None
        self.offsets: dict[str, int] = {}
        self.pending: dict[str, tuple[str, bytes]] = {}  # a file's last line, not yet ended, with its tag

    def read(self, final: bool) -> Iterator[str]:
        self.run_id = self.run_id or self.mlflow_run()
        if not self.run_id:
            return
        files = self._files()
        several = len({attempt for attempt, _, _, _ in files}) > 1
        for attempt, node, _, path in sorted(files):
            size = self.offsets.get(path, 0)
            data = self._download(path, size)
            self.offsets[path] = size + len(data)
            tag = f"[attempt{attempt} node{node}]" if several else f"[node{node}]"
            lines = (self.pending.pop(path, (tag, b""))[1] + data).split(b"\n")
            if lines[-1]:
                self.pending[path] = (tag, lines[-1])  # a line not ended yet: it waits for its end
            for line in lines[:-1]:
                yield f"{tag} {line.decode('utf-8', 'replace').rstrip(chr(13))}"
        if final:  # the run has ended: what a node wrote last without a newline is all there will be
            for tag, rest in self.pending.values():
                yield f"{tag} {rest.decode('utf-8', 'replace').rstrip(chr(13))}"
            self.pending.clear()

    def _list(self, path: str) -> list[Any]:
        assert self.run_id is not None
        run_id = self.run_id

        def listing() -> list[Any]:
            return list(self.w.experiments.list_artifacts(run_id=run_id, path=path))

        found = self.call(partial(_served_or_empty, listing), f"MLflow artifacts of run {run_id} under {path}")
        return list(found or [])

    def _files(self) -> list[tuple[int, int, int, str]]:
        """(attempt, node, chunk, path) of every log file; the older layout's nodes are attempt 0's."""
        found: list[tuple[int, int, int, str]] = []
        for top in self._list("logs"):
            name = str(top.path or "").rsplit("/", 1)[-1]
            attempt = _ATTEMPT.fullmatch(name)
            if attempt and top.is_dir:
                for node_dir in self._list(str(top.path)):
                    found += self._node_files(int(attempt.group(1)), node_dir)
            else:
                found += self._node_files(0, top)
        return found

    def _node_files(self, attempt: int, folder: Any) -> list[tuple[int, int, int, str]]:
        node = _NODE.fullmatch(str(folder.path or "").rsplit("/", 1)[-1])
        if node is None or not folder.is_dir:
            return []
        files = []
        for entry in self._list(str(folder.path)):
            chunk = _CHUNK.fullmatch(str(entry.path or "").rsplit("/", 1)[-1])
            if chunk and not entry.is_dir and int(entry.file_size or 0) > self.offsets.get(str(entry.path), 0):
                files.append((attempt, int(node.group(1)), int(chunk.group(1)), str(entry.path)))
        return files

    def _download(self, path: str, start: int) -> bytes:
        """The file's bytes from `start`, through the signed URL the workspace gives for it (the storage's own
        credentials are in the URL and its headers; the workspace's token stays with the workspace)."""
        import requests

        assert self.run_id is not None
        query = {"run_id": self.run_id, "path": path}
        answer = self.call(
            partial(self.w.api_client.do, "GET", "/api/2.0/mlflow/artifacts/credentials-for-read", query=query),
            f"a read credential for the MLflow artifact {path}",
        )
        infos = (answer or {}).get("credential_infos") or []
        if not infos:
            return b""
        headers = {str(h.get("name")): str(h.get("value")) for h in infos[0].get("headers") or []}
        if start:
            headers["Range"] = f"bytes={start}-"

        def fetch() -> bytes:
            with requests.get(infos[0]["signed_uri"], headers=headers, timeout=self.timeout, stream=True) as got:
                said = f"databricks: the MLflow artifact {path}: HTTP {got.status_code}"
                failed = error_for_status(got.status_code, said)
                if failed is not None:
                    raise failed
                data = got.raw.read(MAX_CHUNK + 1, decode_content=True)
                skip = start if got.status_code == 200 else 0  # a store that ignores Range sends it all
                return bytes(data[skip : skip + MAX_CHUNK])

        return bytes(self.call(fetch, f"the MLflow artifact {path}") or b"")


def _served_or_empty(fn: Callable[[], list[Any]]) -> list[Any]:
    """The listing, or none where the run has no such folder (yet) or the workspace has no MLflow artifacts."""
    from crosstrain.adaptors import databricks as adaptor

    found = adaptor.served_or_none(fn)
    return found if found is not None else []
