"""Every node's log lines, from AI Runtime's per-node logs endpoint
(`GET /api/2.0/ai-training/workflows/by-run-id/{run_id}/logs`, which the `databricks air` CLI reads with a raw
client: the SDK does not model it), each prefixed with its node. The endpoint answers
`{"log_records": [{"time_unix_nano", "body", "node_index"}], "next_page_token"}`, oldest first, by pages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

#: The most records one page asks for.
PAGE_SIZE = 1000
#: How far back each read starts before the newest record seen: a node's lines may reach the service later than
#: another's newer ones, and those are read (once) if they come within this many seconds.
LATE_SECONDS = 120
#: Said once where the workspace does not serve the endpoint.
NOT_SERVED = (
    "[crosstrain: this workspace does not serve AI Runtime's per-node logs (FEATURE_DISABLED or not found); the "
    "run's logs are under its MLflow run's artifacts (logs/attempt_<n>/node_<k>/), and on its run page]"
)


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
                yield NOT_SERVED
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
