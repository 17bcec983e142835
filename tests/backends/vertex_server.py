"""A loopback Vertex AI job service: the REST paths `JobServiceClient` calls, on `LoopbackService`.

It speaks `customJobs` create, list (with a `labels.KEY="VALUE"` filter, paged), get and cancel on
http://127.0.0.1:PORT, so tests run the real GAPIC client, its REST transport, crosstrain's adaptor and retry
policy. The operations faults are scripted by are "create", "find" (the list), "get" and "cancel"; the faults are
the shared ones of `crosstrain.testing.loopback`.

`createTime` strictly increases (to the microsecond) in the order jobs are created, so the earliest job with an
identity is well defined even for concurrent creates. A job moves one step along `plan` at each get, unless a
test pinned its state; cancel moves a live job to CANCELLING (CANCELLED at the next get) and is refused with
FAILED_PRECONDITION for a job that has ended.

`VertexPlatform` is the service served on a free port plus backends wired to it: the send-side conformance suite
drives it, and so can a benchmark (`with VertexPlatform() as platform: ...`, no pytest needed).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors import gapic
from crosstrain.backends._google import IDENTITY_LABEL
from crosstrain.backends.vertex import VertexBackend
from crosstrain.retry import RetryPolicy
from crosstrain.testing.loopback import Call, LoopbackPlatform, LoopbackService, Reply, serving

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceClient

    from crosstrain.backends.base import JobHandle

_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/customJobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/customJobs/\d+)(:cancel)?$")
_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)="([^"]*)"$')

#: States after which a job changes no more.
ENDED = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)
CANCELLED = frozenset({"JOB_STATE_CANCELLING", "JOB_STATE_CANCELLED"})


def native_states() -> tuple[str, ...]:
    """Every state the API defines, from the SDK's own enum."""
    from google.cloud.aiplatform_v1.types import JobState

    return tuple(JobState.__members__)


class VertexJobService(LoopbackService):
    """The server side. `jobs` maps job names to the JSON the API returns for them."""

    def __init__(
        self,
        *,
        plan: Sequence[str] = ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"),
        page_size: int = 50,
        slow_seconds: float = 1.0,
        late_seconds: float = 0.2,
    ) -> None:
        super().__init__(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.plan = list(plan)
        self.page_size = page_size
        self.jobs: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.pinned: set[str] = set()
        self._ids = itertools.count(1000)
        self._last_created_us = 0

    # -- LoopbackService -----------------------------------------------------------------------------------
    def operation(self, call: Call) -> str:
        if _COLLECTION.match(call.path):
            return "create" if call.method == "POST" else "find"
        match = _JOB.match(call.path)
        if match:
            return "cancel" if match.group(2) else "get"
        return "unknown"

    def answer(self, call: Call) -> Reply:
        operation = self.operation(call)
        collection, job = _COLLECTION.match(call.path), _JOB.match(call.path)
        if operation == "create" and collection:
            return Reply(200, self.create(collection.group(1), call.body))
        if operation == "find" and collection:
            page = self.find(collection.group(1), call.query)
            return Reply(200, page) if page is not None else self.error(400, f"unsupported filter {call.query}")
        if job and job.group(1) in self.jobs:
            name = job.group(1)
            if operation == "get" and call.method == "GET":
                return Reply(200, self.get(name))
            if operation == "cancel" and call.method == "POST":
                return self.cancel(name)
        return self.error(404, f"no {call.method} {call.path}")

    # -- the job service -----------------------------------------------------------------------------------
    def create(self, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        created_us = max(time.time_ns() // 1000, self._last_created_us + 1)
        self._last_created_us = created_us
        stamp = datetime.fromtimestamp(created_us // 1_000_000, timezone.utc).replace(
            microsecond=created_us % 1_000_000
        )
        name = f"{parent}/customJobs/{next(self._ids)}"
        job = {**body, "name": name, "state": self.plan[0], "createTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        self.jobs[name] = job
        self.polls[name] = 0
        return job

    def find(self, parent: str, query: Mapping[str, str]) -> dict[str, Any] | None:
        """A page of the jobs in `parent` that match the filter; None for a filter the fake cannot read."""
        wanted = _FILTER.match(query.get("filter", ""))
        if query.get("filter") and wanted is None:
            return None
        jobs = [
            job
            for name, job in self.jobs.items()
            if name.startswith(parent + "/")
            and (wanted is None or job.get("labels", {}).get(wanted.group(1)) == wanted.group(2))
        ]
        start = int(query.get("pageToken") or 0)
        size = min(int(query.get("pageSize") or self.page_size), self.page_size)
        page: dict[str, Any] = {"customJobs": jobs[start : start + size]} if jobs[start : start + size] else {}
        if start + size < len(jobs):
            page["nextPageToken"] = str(start + size)
        return page

    def get(self, name: str) -> dict[str, Any]:
        job = self.jobs[name]
        if job["state"] == "JOB_STATE_CANCELLING":
            job["state"] = "JOB_STATE_CANCELLED"
        elif job["state"] not in ENDED and name not in self.pinned:
            self.polls[name] += 1
            job["state"] = self.plan[min(self.polls[name], len(self.plan) - 1)]
        return job

    def cancel(self, name: str) -> Reply:
        job = self.jobs[name]
        if job["state"] in ENDED:
            error = {"code": 400, "message": f"{name} is {job['state']}", "status": "FAILED_PRECONDITION"}
            return Reply(400, {"error": error})
        if job["state"] != "JOB_STATE_CANCELLING":
            job["state"] = "JOB_STATE_CANCELLING"
            self.pinned.discard(name)
        return Reply(200, {})

    def set_state(self, name: str, native: str) -> None:
        """Make the job report `native` from now on."""
        with self.lock:
            self.jobs[name]["state"] = native
            self.pinned.add(name)

    def with_identity(self, identity: str) -> list[dict[str, Any]]:
        """The jobs that carry `identity`, in creation order."""
        with self.lock:
            jobs = [job for job in self.jobs.values() if job.get("labels", {}).get(IDENTITY_LABEL) == identity]
        return sorted(jobs, key=lambda job: (job["createTime"], job["name"]))


def loopback_client(url: str) -> JobServiceClient:
    """The real GAPIC client on its REST transport, pointed at a loopback URL, with anonymous credentials."""
    return gapic.job_service_client(url, credentials=gapic.anonymous_credentials())


class VertexPlatform(LoopbackPlatform):
    """The loopback job service, served while the platform is entered, and Vertex backends wired to it.

    The retry policy gives up on a call after `call_timeout` (the service's "slow" fault answers after
    `slow_seconds`, later), and sleeps for real at most `max_sleep` per pause, so a settle window of `settle`
    seconds really passes and a "late" create (`late_seconds`) lands inside it.
    """

    settings = {"project": "my-project", "region": "us-central1"}

    def __init__(
        self,
        *,
        plan: Sequence[str] = ("JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"),
        slow_seconds: float = 1.0,
        late_seconds: float = 0.2,
        call_timeout: float = 0.5,
        settle: float = 0.6,
        look_interval: float = 0.05,
        max_sleep: float = 0.05,
    ) -> None:
        self.native_states = native_states()
        self.service = VertexJobService(plan=plan, slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.call_timeout, self.settle_seconds, self.look_interval = call_timeout, settle, look_interval
        self.max_sleep = max_sleep
        self.sleeps: list[float] = []
        self.url = ""
        self._stack = ExitStack()

    def __enter__(self) -> VertexPlatform:
        self.url = self._stack.enter_context(serving(self.service))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stack.close()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        time.sleep(min(seconds, self.max_sleep))

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            call_timeout=self.call_timeout,
            settle=self.settle_seconds,
            look_interval=self.look_interval,
            sleep=self.sleep,
        )

    def client(self, endpoint: str = "") -> JobServiceClient:
        """A client on the loopback service, whatever regional endpoint the request names."""
        assert self.url, "enter the platform (`with VertexPlatform() as platform:`) before using it"
        return loopback_client(self.url)

    def backend(self, retry: RetryPolicy | None = None) -> VertexBackend:
        return VertexBackend(client_factory=self.client, retry=retry or self.retry_policy(), environ={})

    # -- LoopbackPlatform ----------------------------------------------------------------------------------
    def inject(self, operation: str, fault: str) -> None:
        self.service.inject({"create": "create", "submit-read": "find", "poll": "get"}.get(operation, operation), fault)

    def live_jobs(self, identity: str) -> list[str]:
        jobs = self.service.with_identity(identity)
        return [job["name"].rsplit("/", 1)[1] for job in jobs if job["state"] not in CANCELLED]

    def all_jobs(self, identity: str) -> list[str]:
        return [job["name"].rsplit("/", 1)[1] for job in self.service.with_identity(identity)]

    def set_state(self, handle: JobHandle, native: str) -> None:
        self.service.set_state(handle.ref["name"], native)

    def child_backend(self) -> str:
        return (
            "from crosstrain.adaptors import gapic\n"
            "from crosstrain.backends.vertex import VertexBackend\n"
            "backend = VertexBackend(\n"
            f"    client_factory=lambda endpoint: gapic.job_service_client({self.url!r}, "
            "credentials=gapic.anonymous_credentials()),\n"
            "    environ={},\n"
            ")\n"
        )

    def settle(self) -> None:
        self.service.settle()
