"""A loopback Vertex AI job service: the REST paths `JobServiceClient` calls, on `LoopbackService`.

It speaks `customJobs` create, list (with a `labels.KEY="VALUE"` filter, paged), get and cancel on
http://127.0.0.1:PORT, so tests run the real GAPIC client, its REST transport, crosstrain's adaptor and retry
policy. The operations faults are scripted by are "create", "find" (the list), "get" and "cancel"; the faults are
the shared ones of `crosstrain.backends.loopback`.

`createTime` strictly increases (to the microsecond) in the order jobs are created, so the earliest job with an
identity is well defined even for concurrent creates. A job moves one step along `plan` at each get, unless a
test pinned its state; cancel moves a live job to CANCELLING (CANCELLED at the next get) and is refused with
FAILED_PRECONDITION for a job that has ended.

It also speaks Cloud Logging's `entries:list` (`POST /v2/entries:list`, the call google-cloud-logging's REST
client makes; operation "entries"), with the filter clauses crosstrain sends (`resource.type`,
`resource.labels.job_id`, `resource.labels.task_name` equal to a value, `timestamp>=` a time), `orderBy` by
timestamp either way, and pages. A job's log entries appear over time: each get that moves a running job on
releases the next batch of `log_plan` (every entry of a batch has the same timestamp, so a cursor must tell
entries apart by insertId), and the job's end releases the rest. A `LogLine` marked `late` is stamped with the
previous batch's time, as Cloud Logging ingests an entry after later ones. A job that ends FAILED carries
`failure` as its `error.message`.

`VertexPlatform` is the service served on a free port plus backends wired to it: the send-side conformance suite
drives it, and so can a benchmark (`with VertexPlatform() as platform: ...`, no pytest needed).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors import gapic
from crosstrain.backends._google import IDENTITY_LABEL
from crosstrain.backends.loopback import Call, LoopbackPlatform, LoopbackService, Reply, serving
from crosstrain.backends.vertex.backend import VertexBackend
from crosstrain.retry import RetryPolicy

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import JobServiceClient

    from crosstrain.records import JobHandle

_COLLECTION = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+)/(customJobs|hyperparameterTuningJobs)$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/locations/[^/]+/(?:customJobs|hyperparameterTuningJobs)/\d+)(:cancel)?$")
_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)(?:="([^"]*)"|(:\*))$')
_ENTRIES = "/v2/entries:list"
_CLAUSE = re.compile(r'^(?:(resource\.type|resource\.labels\.(?:job_id|task_name))=|(timestamp)>=)"([^"]*)"$')


@dataclass(frozen=True)
class LogLine:
    """One log entry a replica (`task`, e.g. workerpool0-0, or "service") writes; `late`: stamped with the
    previous batch's time."""

    task: str
    text: str
    late: bool = False


def _stamp(us: int) -> str:
    moment = datetime.fromtimestamp(us // 1_000_000, timezone.utc).replace(microsecond=us % 1_000_000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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
        log_plan: Sequence[Sequence[LogLine]] = (),
        failure: str = "",
    ) -> None:
        super().__init__(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.plan = list(plan)
        self.page_size = page_size
        #: What `crosstrain check` meets: a project whose job service refuses the caller (403 PERMISSION_DENIED).
        self.denied = False
        self.log_plan = [list(batch) for batch in log_plan]
        self.failure = failure
        self.entries: list[dict[str, Any]] = []
        self.released: dict[str, int] = {}  # batches of log_plan released, by job
        self._last_entry_us = 0
        self._insert_ids = itertools.count(1)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.pinned: set[str] = set()
        self._ids = itertools.count(1000)
        self._last_created_us = 0

    # -- LoopbackService -----------------------------------------------------------------------------------
    def operation(self, call: Call) -> str:
        if call.path == _ENTRIES:
            return "entries"
        if _COLLECTION.match(call.path):
            return "create" if call.method == "POST" else "find"
        match = _JOB.match(call.path)
        if match:
            return "cancel" if match.group(2) else "get"
        return "unknown"

    def answer(self, call: Call) -> Reply:
        operation = self.operation(call)
        if self.denied:
            return Reply(
                403,
                {
                    "error": {
                        "code": 403,
                        "status": "PERMISSION_DENIED",
                        "message": "Permission 'aiplatform.customJobs.list' denied on resource (or it may not exist).",
                    }
                },
            )
        collection, job = _COLLECTION.match(call.path), _JOB.match(call.path)
        if operation == "entries" and call.method == "POST":
            page = self.list_entries(call.body or {})
            return Reply(200, page) if page is not None else self.error(400, f"unsupported filter {call.body}")
        if operation == "create" and collection:
            return Reply(200, self.create(collection.group(1), call.body, collection.group(2)))
        if operation == "find" and collection:
            page = self.find(collection.group(1), call.query, collection.group(2))
            return Reply(200, page) if page is not None else self.error(400, f"unsupported filter {call.query}")
        if job and job.group(1) in self.jobs:
            name = job.group(1)
            if operation == "get" and call.method == "GET":
                return Reply(200, self.get(name))
            if operation == "cancel" and call.method == "POST":
                return self.cancel(name)
        return self.error(404, f"no {call.method} {call.path}")

    # -- the job service -----------------------------------------------------------------------------------
    def create(self, parent: str, body: dict[str, Any], kind: str = "customJobs") -> dict[str, Any]:
        created_us = max(time.time_ns() // 1000, self._last_created_us + 1)
        self._last_created_us = created_us
        stamp = datetime.fromtimestamp(created_us // 1_000_000, timezone.utc).replace(
            microsecond=created_us % 1_000_000
        )
        name = f"{parent}/{kind}/{next(self._ids)}"
        job = {**body, "name": name, "state": self.plan[0], "createTime": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
        self.jobs[name] = job
        self.polls[name] = 0
        return job

    def find(self, parent: str, query: Mapping[str, str], kind: str = "customJobs") -> dict[str, Any] | None:
        """A page of the jobs in `parent` that match the filter; None for a filter the fake cannot read."""
        wanted = _FILTER.match(query.get("filter", ""))
        if query.get("filter") and wanted is None:
            return None

        def matches(labels: Mapping[str, str]) -> bool:
            if wanted is None:
                return True
            return wanted.group(1) in labels if wanted.group(3) else labels.get(wanted.group(1)) == wanted.group(2)

        jobs = [
            job
            for name, job in self.jobs.items()
            if name.startswith(f"{parent}/{kind}/") and matches(job.get("labels", {}))
        ]
        start = int(query.get("pageToken") or 0)
        size = min(int(query.get("pageSize") or self.page_size), self.page_size)
        page: dict[str, Any] = {kind: jobs[start : start + size]} if jobs[start : start + size] else {}
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
            if job["state"] == "JOB_STATE_RUNNING":
                self.release(name, 1)
            elif job["state"] in ENDED:
                self.release(name, len(self.log_plan))
                if job["state"] == "JOB_STATE_FAILED" and self.failure:
                    job["error"] = {"code": 3, "message": self.failure}
        return job

    # -- Cloud Logging -------------------------------------------------------------------------------------
    def release(self, name: str, batches: int) -> None:
        """Write the job's next `batches` batches of `log_plan` to the log, one timestamp per batch."""
        project, job_id = name.split("/")[1], name.rsplit("/", 1)[1]
        start = self.released.get(name, 0)
        for batch in self.log_plan[start : start + batches]:
            previous = self._last_entry_us
            self._last_entry_us = max(time.time_ns() // 1000, previous + 1)
            for line in batch:
                us = previous if line.late and previous else self._last_entry_us
                self.entries.append(
                    {
                        "logName": f"projects/{project}/logs/{line.task}",
                        "resource": {
                            "type": "ml_job",
                            "labels": {"job_id": job_id, "project_id": project, "task_name": line.task},
                        },
                        "textPayload": line.text,
                        "timestamp": _stamp(us),
                        "insertId": f"{next(self._insert_ids):08d}",
                        "severity": "ERROR" if "Error" in line.text else "INFO",
                    }
                )
        self.released[name] = min(start + batches, len(self.log_plan))

    def list_entries(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """A page of `entries:list`; None for a filter the fake cannot read."""
        wanted: list[tuple[str, str]] = []
        for clause in str(body.get("filter") or "").split(" AND "):
            match = _CLAUSE.match(clause.strip())
            if match is None:
                return None
            wanted.append((match[1] or match[2], match[3]))
        projects = {name.removeprefix("projects/") for name in body.get("resourceNames", [])}

        def keep(entry: dict[str, Any]) -> bool:
            if entry["resource"]["labels"]["project_id"] not in projects:
                return False
            for key, value in wanted:
                if key == "timestamp":
                    if _parse_time(entry["timestamp"]) < _parse_time(value):
                        return False
                elif key == "resource.type":
                    if entry["resource"]["type"] != value:
                        return False
                elif entry["resource"]["labels"].get(key.rsplit(".", 1)[1]) != value:
                    return False
            return True

        found = sorted(
            (entry for entry in self.entries if keep(entry)),
            key=lambda entry: (_parse_time(entry["timestamp"]), entry["insertId"]),
            reverse=str(body.get("orderBy", "")).endswith("desc"),
        )
        start = int(body.get("pageToken") or 0)
        size = min(int(body.get("pageSize") or self.page_size), self.page_size)
        page: dict[str, Any] = {"entries": found[start : start + size]} if found[start : start + size] else {}
        if start + size < len(found):
            page["nextPageToken"] = str(start + size)
        return page

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
        log_plan: Sequence[Sequence[LogLine]] = (),
        failure: str = "",
        page_size: int = 50,
    ) -> None:
        self.native_states = native_states()
        self.service = VertexJobService(
            plan=plan,
            slow_seconds=slow_seconds,
            late_seconds=late_seconds,
            log_plan=log_plan,
            failure=failure,
            page_size=page_size,
        )
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

    def logging_client(self, project: str) -> Any:
        """google-cloud-logging's REST client on the loopback service."""
        assert self.url, "enter the platform (`with VertexPlatform() as platform:`) before using it"
        return gapic.logging_client(project, endpoint=self.url, credentials=gapic.anonymous_credentials())

    def backend(self, retry: RetryPolicy | None = None) -> VertexBackend:
        return VertexBackend(
            client_factory=self.client,
            retry=retry or self.retry_policy(),
            environ={},
            logging_client=self.logging_client,
            log_interval=0.01,
            log_lookback=5.0,
            log_grace=0.0,
        )

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
