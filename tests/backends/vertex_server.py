"""A loopback Vertex AI job service: the REST paths `JobServiceClient` calls, with scriptable faults.

It speaks `customJobs` create, get, list (with a `labels.KEY="VALUE"` filter) and cancel on
http://127.0.0.1:PORT, so tests run the real GAPIC client, its REST transport and crosstrain's retry policy.
Faults are scripted per operation (`faults={"create": ["refuse"], "get": ["error"]}`):

* "refuse": 503 before anything is stored;
* "rate-limit": 429 with `Retry-After: 2`, nothing stored;
* "drop": the job is stored, then the connection closes without an answer;
* "error": 500, nothing changes;
* "invalid": 400, a permanent refusal.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/\d+)(:cancel)?$")
_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)="([^"]*)"$')


class VertexJobService:
    """The server side. `received` holds every request as (method, path, query, parsed JSON body)."""

    def __init__(self, faults: Mapping[str, Sequence[str]] | None = None, plan: Sequence[str] = ()) -> None:
        self.faults = {op: deque(items) for op, items in (faults or {}).items()}
        self.plan = list(plan or ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"))
        self.jobs: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.received: list[tuple[str, str, dict[str, list[str]], Any]] = []
        self.lock = threading.Lock()

    def fault(self, operation: str) -> str | None:
        queue = self.faults.get(operation)
        return queue.popleft() if queue else None

    def create(self, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        name = f"{parent}/customJobs/{1000 + len(self.jobs)}"
        job = {**body, "name": name, "state": self.plan[0], "createTime": f"2026-01-01T00:00:{len(self.jobs):02d}Z"}
        self.jobs[name] = job
        self.polls[name] = 0
        return job

    def get(self, name: str) -> dict[str, Any]:
        job = self.jobs[name]
        if job["state"] not in ("JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"):
            self.polls[name] += 1
            job["state"] = self.plan[min(self.polls[name], len(self.plan) - 1)]
        elif job["state"] == "JOB_STATE_CANCELLING":
            job["state"] = "JOB_STATE_CANCELLED"
        return job


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _reply(self, code: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, status: str) -> None:
        headers = {"Retry-After": "2"} if code == 429 else None
        self._reply(code, {"error": {"code": code, "message": f"injected {status}", "status": status}}, headers)

    def _faulted(self, operation: str) -> str | None:
        fault = self.server.service.fault(operation)
        if fault == "refuse":
            self._error(503, "UNAVAILABLE")
        elif fault == "rate-limit":
            self._error(429, "RESOURCE_EXHAUSTED")
        elif fault == "error":
            self._error(500, "INTERNAL")
        elif fault == "invalid":
            self._error(400, "INVALID_ARGUMENT")
        return fault

    def _record(self) -> tuple[str, dict[str, list[str]], Any]:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        query = parse_qs(url.query)
        self.server.service.received.append((self.command, url.path, query, body))
        return url.path, query, body

    def do_POST(self) -> None:
        path, _, body = self._record()
        service = self.server.service
        with service.lock:
            if match := _COLLECTION.match(path):
                fault = self._faulted("create")
                if fault in ("refuse", "rate-limit", "error", "invalid"):
                    return
                job = service.create(match.group(1), body)
                if fault == "drop":
                    self.close_connection = True
                    return
                self._reply(200, job)
            elif (match := _JOB.match(path)) and match.group(2) and match.group(1) in service.jobs:
                job = service.jobs[match.group(1)]
                if job["state"] not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
                    job["state"] = "JOB_STATE_CANCELLING"
                self._reply(200, {})
            else:
                self._error(404, "NOT_FOUND")

    def do_GET(self) -> None:
        path, query, _ = self._record()
        service = self.server.service
        with service.lock:
            if match := _COLLECTION.match(path):
                if self._faulted("list"):
                    return
                wanted = _FILTER.match(query.get("filter", [""])[0])
                jobs = [
                    job
                    for name, job in service.jobs.items()
                    if name.startswith(match.group(1) + "/")
                    and (wanted is None or job.get("labels", {}).get(wanted.group(1)) == wanted.group(2))
                ]
                self._reply(200, {"customJobs": jobs} if jobs else {})
            elif (match := _JOB.match(path)) and not match.group(2) and match.group(1) in service.jobs:
                if self._faulted("get"):
                    return
                self._reply(200, service.get(match.group(1)))
            else:
                self._error(404, "NOT_FOUND")


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: VertexJobService) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service = service


@contextmanager
def serving(service: VertexJobService) -> Iterator[str]:
    """Serve `service` on a free loopback port; yields `http://127.0.0.1:PORT`."""
    server = _Server(service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def client(endpoint: str) -> Any:
    """The real GAPIC client on its REST transport, pointed at the loopback server, anonymous credentials."""
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.aiplatform_v1 import JobServiceClient

    return JobServiceClient(
        credentials=AnonymousCredentials(), transport="rest", client_options=ClientOptions(api_endpoint=endpoint)
    )
