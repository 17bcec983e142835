"""A loopback Databricks workspace for tests: the few REST endpoints crosstrain calls, on 127.0.0.1.

It behaves as Databricks documents: `runs/submit` with a known `idempotency_token` returns that run instead
of starting another, and `runs/get-output` answers only for a task run's id. Faults for `runs/submit` are
scripted: "slow" (starts the run, answers after `slow_seconds`, long enough for the client to time out and
resend), "503", "429" (with Retry-After: 1), and "drop" (starts the run, then closes the connection unanswered).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class Workspace:
    def __init__(self, faults: list[str] | None = None, *, slow_seconds: float = 2.0) -> None:
        self.faults = deque(faults or [])
        self.slow_seconds = slow_seconds
        self.lock = threading.Lock()
        self.received: list[tuple[str, str, Any]] = []  # (method, path, body) of every API call
        self.runs: dict[int, dict[str, Any]] = {}
        self.tokens: dict[str, int] = {}
        self.files: dict[str, str] = {}
        #: the (life_cycle_state, result_state) that successive `runs/get` calls report; the last one stays
        self.states: list[tuple[str, str | None]] = [("PENDING", None), ("RUNNING", None), ("TERMINATED", "SUCCESS")]
        self.output = {"logs": "epoch 1 loss 0.5\nepoch 2 loss 0.1", "error": None}
        self.url = ""

    def submits(self) -> list[dict[str, Any]]:
        return [body for method, path, body in self.received if path.endswith("/jobs/runs/submit")]

    # -- endpoints -----------------------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> int:
        with self.lock:
            token = body.get("idempotency_token")
            if token in self.tokens:
                return self.tokens[token]
            run_id = 1000 + len(self.runs)
            self.runs[run_id] = {"body": body, "task_run_id": run_id + 500, "polls": 0, "cancelled": False}
            if token:
                self.tokens[token] = run_id
            return run_id

    def get_run(self, run_id: int) -> dict[str, Any]:
        run = self.runs[run_id]
        life, result = self.states[min(run["polls"], len(self.states) - 1)]
        run["polls"] += 1
        if run["cancelled"]:
            life, result = "TERMINATED", "CANCELED"
        state: dict[str, Any] = {"life_cycle_state": life, "state_message": f"run is {life.lower()}"}
        if result:
            state["result_state"] = result
        return {
            "run_id": run_id,
            "run_name": run["body"].get("run_name"),
            "run_page_url": f"{self.url}/#job/runs/{run_id}",
            "state": state,
            "tasks": [{"run_id": run["task_run_id"], "task_key": "train", "state": state}],
        }

    def get_output(self, run_id: int) -> tuple[int, dict[str, Any]]:
        for run in self.runs.values():
            if run["task_run_id"] == run_id:
                return 200, {k: v for k, v in self.output.items() if v is not None}
        return 400, {
            "error_code": "INVALID_PARAMETER_VALUE",
            "message": "Retrieving the output of runs with multiple tasks is not supported. Please retrieve the "
            "output of each individual task run instead.",
        }


def _handler(ws: Workspace) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlparse(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            if url.path == "/.well-known/databricks-config":
                return self._answer(404, {"error_code": "NOT_FOUND", "message": "no host metadata"})
            ws.received.append(("GET", url.path, query))
            if url.path.endswith("/jobs/runs/get"):
                return self._answer(200, ws.get_run(int(query["run_id"])))
            if url.path.endswith("/jobs/runs/get-output"):
                return self._answer(*ws.get_output(int(query["run_id"])))
            return self._answer(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": url.path})

        def do_POST(self) -> None:
            path = urlparse(self.path).path
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            ws.received.append(("POST", path, body))
            if path.endswith("/jobs/runs/submit"):
                return self._submit(body)
            if path.endswith("/jobs/runs/cancel"):
                ws.runs[body["run_id"]]["cancelled"] = True
                return self._answer(200, {})
            if path.endswith("/workspace/mkdirs"):
                return self._answer(200, {})
            if path.endswith("/workspace/import"):
                ws.files[body["path"]] = body["content"]
                return self._answer(200, {})
            return self._answer(404, {"error_code": "ENDPOINT_NOT_FOUND", "message": path})

        def _submit(self, body: dict[str, Any]) -> None:
            fault = ws.faults.popleft() if ws.faults else None
            if fault == "503":
                return self._answer(503, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "try again"})
            if fault == "429":
                return self._answer(
                    429, {"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"}, {"Retry-After": "1"}
                )
            run_id = ws.submit(body)
            if fault == "drop":
                self.close_connection = True
                self.connection.close()
                return None
            if fault == "slow":
                time.sleep(ws.slow_seconds)
            with contextlib.suppress(OSError):  # after "slow" the client has given up waiting, as intended
                self._answer(200, {"run_id": run_id, "number_in_job": run_id})
            return None

    return Handler


@contextmanager
def serve(ws: Workspace) -> Iterator[Workspace]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ws))
    server.daemon_threads = True
    ws.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield ws
    finally:
        server.shutdown()
        server.server_close()
