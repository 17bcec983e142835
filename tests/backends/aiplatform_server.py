"""A loopback `ml.googleapis.com/v1`: the job paths crosstrain's `aiplatform` backend calls, with the shared faults.

`MLService` is a `LoopbackService` that speaks `projects.jobs` create (409 ALREADY_EXISTS on a taken jobId),
get and cancel. Faults are scripted per operation, "create", "get" and "cancel", and mean what they mean on
every platform fake (`crosstrain.backends.loopback`). A "late" create that takes effect after the client has
already made the job meets the same jobId and is refused with 409, as the real service refuses it: the jobId
is the idempotency key.

`AIPlatformPlatform` is the running fake plus a backend wired to it, for the send-side conformance suite and
for benchmarks, without pytest:

    with AIPlatformPlatform() as platform:
        platform.inject("create", "drop")
        backend = platform.backend()
        handle = backend.send(backend.render(job, dict(platform.settings)))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from crosstrain.backends.aiplatform.backend import AIPlatformBackend
from crosstrain.backends.loopback import Call, LoopbackPlatform, LoopbackService, Reply, serving
from crosstrain.records import JobHandle
from crosstrain.retry import RetryPolicy
from tests.backends.discovery import document

if TYPE_CHECKING:
    import requests

_COLLECTION = re.compile(r"^/v1/projects/([^/]+)/jobs$")
_JOB = re.compile(r"^/v1/(projects/[^/]+/jobs/[^/:]+)(:cancel)?$")

#: `GoogleCloudMlV1__Job.state` as the ml.v1 discovery document defines it.
NATIVE_STATES: tuple[str, ...] = tuple(
    document("ml.v1")["schemas"]["GoogleCloudMlV1__Job"]["properties"]["state"]["enum"]
)
ENDED = ("SUCCEEDED", "FAILED", "CANCELLED")
IDENTITY_LABEL = "crosstrain-id"


class MLService(LoopbackService):
    """The server side. `jobs` maps `projects/P/jobs/ID` to the stored job; each GET moves a job one step
    along `plan` until `pin` fixes its state, and a cancelled job stays cancelled."""

    def __init__(
        self,
        plan: Sequence[str] = ("QUEUED", "RUNNING", "SUCCEEDED"),
        *,
        slow_seconds: float = 1.0,
        late_seconds: float | Callable[[], float] = 0.3,
    ) -> None:
        super().__init__(slow_seconds=slow_seconds, late_seconds=late_seconds)
        self.plan = tuple(plan)
        self.jobs: dict[str, dict[str, Any]] = {}
        self.reads: dict[str, int] = {}
        self.pinned: dict[str, str] = {}
        self.denied = False  # what `crosstrain check` meets: a caller the project refuses (403)

    def operation(self, call: Call) -> str:
        if call.method == "POST" and _COLLECTION.match(call.path):
            return "create"
        return "cancel" if call.path.endswith(":cancel") else "get"

    def answer(self, call: Call) -> Reply:
        collection = _COLLECTION.match(call.path)
        if self.denied:
            return self.error(403, "Permission denied on resource project (or it may not exist).")
        if call.method == "GET" and collection:  # projects.jobs.list (check reads one page)
            return Reply(200, {"jobs": list(self.jobs.values())[:1]})
        if call.method == "POST" and collection:
            return self._create(collection.group(1), call.body)
        match = _JOB.match(call.path)
        if not match or match.group(1) not in self.jobs:
            return self.error(404, f"The job {call.path} does not exist.")
        name, cancel = match.groups()
        job = self.jobs[name]
        if call.method == "POST" and cancel:
            if job["state"] in (*ENDED, "CANCELLING"):
                return Reply(
                    400, {"error": {"code": 400, "message": "The job has ended.", "status": "FAILED_PRECONDITION"}}
                )
            self.pinned[name] = "CANCELLED"
            job["state"] = "CANCELLING"  # the next read finds it CANCELLED
            return Reply(200, {})
        if call.method == "GET":
            self._step(name)
            return Reply(200, job)
        return self.error(400, f"ml.v1 has no {call.method} {call.path}")

    def _create(self, project: str, body: Any) -> Reply:
        if not isinstance(body, dict) or not isinstance(body.get("jobId"), str):
            return self.error(400, "Field: job_id Error: A job id is required.")
        name = f"projects/{project}/jobs/{body['jobId']}"
        if name in self.jobs:
            return self.error(409, f"Field: job.job_id Error: A job with this id already exists: {name}")
        self.jobs[name] = {**body, "state": "QUEUED", "createTime": "2025-01-01T00:00:00Z", "etag": "AAA="}
        tuning = (body.get("trainingInput") or {}).get("hyperparameters")
        if tuning:  # a tuning job reports its trials in trainingOutput as they run (none yet)
            tag = tuning.get("hyperparameterMetricTag", "")
            self.jobs[name]["trainingOutput"] = {"isHyperparameterTuningJob": True, "hyperparameterMetricTag": tag}
        self.reads[name] = 0
        return Reply(200, self.jobs[name])

    def _step(self, name: str) -> None:
        job = self.jobs[name]
        if name in self.pinned:
            job["state"] = self.pinned[name]
        else:
            job["state"] = self.plan[min(self.reads[name], len(self.plan) - 1)]
            self.reads[name] += 1
        if job["state"] == "FAILED":
            job["errorMessage"] = "The replica master 0 exited with a non-zero status of 1."

    def live_jobs(self, identity: str) -> list[str]:
        with self.lock:
            return [
                job["jobId"]
                for name, job in self.jobs.items()
                if (job.get("labels") or {}).get(IDENTITY_LABEL) == identity
                and job["state"] not in ("CANCELLING", "CANCELLED")
                and self.pinned.get(name) != "CANCELLED"
            ]


def loopback_session() -> requests.Session:
    """An AuthorizedSession without credentials that ignores proxies: what a test points at the loopback."""
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession

    session: requests.Session = AuthorizedSession(AnonymousCredentials())  # type: ignore[no-untyped-call]
    session.trust_env = False
    return session


class AIPlatformPlatform(LoopbackPlatform):
    """A running `MLService` and backends wired to it. A context manager; `start()`/`stop()` for fixtures."""

    native_states = NATIVE_STATES
    #: The suite's operations as the service names them ("submit-read": the read after a 409).
    OPERATIONS = {"create": "create", "submit-read": "get", "poll": "get", "cancel": "cancel"}

    def __init__(self, service: MLService | None = None, *, call_timeout: float = 0.5) -> None:
        self.service = service or MLService()
        self.call_timeout = call_timeout
        self._stack = ExitStack()
        self.endpoint = ""
        self.settings: dict[str, Any] = {}

    def start(self) -> AIPlatformPlatform:
        self.endpoint = self._stack.enter_context(serving(self.service))
        self.settings = {"project": "my-project", "region": "us-central1", "endpoint": self.endpoint}
        return self

    def stop(self) -> None:
        self._stack.close()

    def __enter__(self) -> AIPlatformPlatform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def retry(self) -> RetryPolicy:
        """Retries that do not really sleep, and a call timeout shorter than a "slow" answer."""
        return RetryPolicy(sleep=lambda seconds: None, call_timeout=self.call_timeout)

    def backend(self) -> AIPlatformBackend:
        # The loopback is the endpoint this "machine" configures: handles and requests for it are accepted.
        return AIPlatformBackend(
            session=loopback_session(), retry=self.retry(), environ={}, settings={"endpoint": self.endpoint}
        )

    def inject(self, operation: str, fault: str) -> None:
        self.service.inject(self.OPERATIONS[operation], fault)

    def live_jobs(self, identity: str) -> list[str]:
        return self.service.live_jobs(identity)

    def set_state(self, handle: JobHandle, native: str) -> None:
        name = handle.ref["url"].split("/v1/", 1)[1]
        with self.service.lock:
            self.service.pinned[name] = native
            self.service.jobs[name]["state"] = native

    def child_backend(self) -> str:
        return (
            "from google.auth.credentials import AnonymousCredentials\n"
            "from google.auth.transport.requests import AuthorizedSession\n"
            "from crosstrain.backends.aiplatform import AIPlatformBackend\n"
            "session = AuthorizedSession(AnonymousCredentials())\n"
            "session.trust_env = False\n"
            f"backend = AIPlatformBackend(session=session, environ={{}}, settings={{'endpoint': {self.endpoint!r}}})\n"
        )

    def settle(self) -> None:
        self.service.settle()
