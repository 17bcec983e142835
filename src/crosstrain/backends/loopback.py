"""The base of every platform fake: a service with scriptable faults, served over HTTP on 127.0.0.1.

Each platform's fake (tests/backends) subclasses `LoopbackService` with the few endpoints crosstrain calls and
names each call's operation ("create", "find", "get", "cancel"...). Faults are scripted per operation and mean
the same thing on every platform, so a fix to how a fault is played lands once:

* "refuse": 503 before anything changes;
* "rate-limit": 429 with `Retry-After: 1`, nothing changes;
* "error": 500, nothing changes;
* "invalid": 400, a permanent refusal;
* "drop": the call takes effect, then the connection closes without an answer;
* "slow": the call takes effect, the answer comes after `slow_seconds` (a client with a shorter timeout
  gives up and resends);
* "late": 504 at once, and the call takes effect `late_seconds` later (a service that creates the job after
  telling the client it timed out);
* "empty": the call takes effect, the answer is a 200 with no body;
* "garbled": the call takes effect, the answer is a 200 whose JSON is cut short;
* "trickle": the call takes effect, the answer comes one byte every `trickle_seconds` (each read of the
  client's socket gets a byte in time, so only a deadline on the whole call ends it).

`LoopbackPlatform` is what the send-side conformance suite drives: a running fake plus the backend wired to it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlparse

from crosstrain.frozen import frozen

if TYPE_CHECKING:
    from crosstrain.backends.base import Backend
    from crosstrain.records import JobHandle

#: How much of a trickled answer is sent before the connection closes (the rest never comes).
TRICKLED_BYTES = 60
FAULTS = ("refuse", "rate-limit", "error", "invalid", "drop", "slow", "late", "empty", "garbled", "trickle")


@frozen
class Call:
    """One call as the service received it."""

    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    raw: bytes = b""  # the body's bytes as received (for uploads: `body` is JSON, or text decoded lossily)


@frozen
class Reply:
    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Seconds between the bytes of the answer (0: all at once).
    pace: float = 0.0


class Dropped(Exception):
    """The call took effect and the connection closes with no answer."""


class LoopbackService(ABC):
    """A platform's server side. Subclasses implement `operation` and `answer`; `dispatch` plays the faults."""

    def __init__(
        self,
        *,
        slow_seconds: float = 2.0,
        late_seconds: float | Callable[[], float] = 3.0,
        trickle_seconds: float = 0.5,
    ) -> None:
        self.lock = threading.RLock()
        self.faults: dict[str, deque[str]] = {}
        self.received: list[Call] = []
        self.played: Counter[str] = Counter()  # faults played, by kind
        self.slow_seconds = slow_seconds
        self.trickle_seconds = trickle_seconds
        self.late_seconds = late_seconds
        self.late: list[threading.Timer] = []

    def inject(self, operation: str, *faults: str) -> None:
        """Play `faults` on the next calls of `operation`, one each."""
        unknown = set(faults) - set(FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
        with self.lock:
            self.faults.setdefault(operation, deque()).extend(faults)

    @abstractmethod
    def operation(self, call: Call) -> str:
        """The name of the operation a call performs, as faults are scripted ("create", "get"...)."""

    @abstractmethod
    def answer(self, call: Call) -> Reply:
        """Perform the call (under the service's lock) and return the platform's answer."""

    def error(self, status: int, message: str) -> Reply:
        """The platform's error envelope; Google's by default."""
        names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED"}
        names |= {500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
        body = {"error": {"code": status, "message": message, "status": names.get(status, "UNKNOWN")}}
        return Reply(status, body, {"Retry-After": "1"} if status == 429 else {})

    def dispatch(self, call: Call) -> Reply:
        """Answer a call, playing the next fault scripted for its operation."""
        with self.lock:
            self.received.append(call)
            operation = self.operation(call)
            queue = self.faults.get(operation)
            fault = queue.popleft() if queue else None
            if fault:
                self.played[fault] += 1
        injected = {"refuse": 503, "rate-limit": 429, "error": 500, "invalid": 400}
        if fault in injected:
            return self.error(injected[fault], f"injected {fault} on {operation}")
        if fault == "late":
            delay = self.late_seconds() if callable(self.late_seconds) else self.late_seconds
            timer = threading.Timer(delay, self._answer, args=(call,))
            timer.daemon = True
            self.late.append(timer)
            timer.start()
            return self.error(504, f"injected late {operation}: it takes effect in {delay:.1f}s")
        reply = self._answer(call)
        if fault == "drop":
            raise Dropped(operation)
        if fault == "slow":
            time.sleep(self.slow_seconds)
        as_json = {"Content-Type": "application/json"}
        if fault == "empty":
            return Reply(200, b"", as_json)
        if fault == "garbled":
            return Reply(200, json.dumps(reply.body).encode()[:-2] if reply.body is not None else b"{", as_json)
        if fault == "trickle":
            return dataclasses.replace(reply, pace=self.trickle_seconds)
        return reply

    def _answer(self, call: Call) -> Reply:
        with self.lock:
            return self.answer(call)

    def settle(self) -> None:
        """Wait for every late call to take effect."""
        for timer in list(self.late):
            timer.join()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out apart: without this each call waits for an ACK

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _serve(self) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        call = Call(self.command, url.path, dict(parse_qsl(url.query)), body, dict(self.headers.items()), raw)
        try:
            reply = self.server.service.dispatch(call)
        except Dropped:
            self.close_connection = True
            return
        raw_reply = isinstance(reply.body, bytes)  # a file's bytes (a download), sent as they are
        data = reply.body if raw_reply else json.dumps(reply.body).encode() if reply.body is not None else b""
        try:
            self.send_response(reply.status)
            if "Content-Type" not in reply.headers:
                self.send_header("Content-Type", "application/octet-stream" if raw_reply else "application/json")
            if "Content-Length" not in reply.headers:  # a HEAD may say the size of what a GET would send
                self.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            if reply.pace:  # a byte at a time, then a hang-up: a client without a deadline waits it out
                for byte in data[:TRICKLED_BYTES]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(reply.pace)
                self.close_connection = True
            else:
                self.wfile.write(data)
        except OSError:  # after "slow" the client may have given up, as intended
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, service: LoopbackService) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service = service

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (after "slow") or hung up is part of the faults, not a server error."""


@contextmanager
def serving(service: LoopbackService) -> Iterator[str]:
    """Serve `service` on a free loopback port; yields `http://127.0.0.1:PORT`."""
    server = _Server(service)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class LoopbackPlatform(ABC):
    """A running fake of one platform as the send-side suite drives it: the backend wired to it, faults by
    the suite's operation names, and what the platform holds."""

    #: Target settings that point a render at this platform.
    settings: Mapping[str, Any]
    #: The native states the platform's API defines (from its SDK's enum), for the state-mapping check.
    native_states: tuple[str, ...] = ()
    #: Those that say only that no other state applies (Azure ML's "Unknown"): they map to UNKNOWN.
    unspecified_states: tuple[str, ...] = ()

    @abstractmethod
    def backend(self) -> Backend[Any, Any]:
        """A backend whose client talks to this platform, with a retry policy that does not really sleep."""

    @abstractmethod
    def inject(self, operation: str, fault: str) -> None:
        """Script `fault` for the next call of `operation`: "create", "submit-read" (a read that submit makes,
        where it makes one), or "poll" (a status read)."""

    @abstractmethod
    def live_jobs(self, identity: str) -> list[str]:
        """Ids of the jobs with this identity that are not cancelled (or being cancelled)."""

    def all_jobs(self, identity: str) -> list[str]:
        """Ids of every job with this identity, cancelled ones included (by default, the live ones)."""
        return self.live_jobs(identity)

    @abstractmethod
    def set_state(self, handle: JobHandle, native: str) -> None:
        """Make the job report `native` from now on."""

    @abstractmethod
    def child_backend(self) -> str:
        """Python source that binds `backend` to a backend talking to this platform, for another process."""

    def settle(self) -> None:  # noqa: B027 - a hook: only platforms that play "late" faults need it
        """Wait until every late fault has taken effect."""
