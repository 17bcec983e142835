"""`fake`: a cloud in a local directory, for tests, demos and CI dry runs of a pipeline's submit/wait steps.

It is a complete backend, not a mock: render produces the JSON body a job server would take, submit PUTs it
under `<root>/jobs/<identity>.json` (a PUT of an identity that exists returns the existing job, the way
platforms dedupe by idempotency token), and the job's state follows the plan in its settings: queued for
`queue_seconds`, running for `run_seconds`, then `outcome`. `FakeCloud(faults=[...])` scripts failures for
testing retries: "refuse" (503 before accepting), "rate-limit" (429 with Retry-After), "lose-response"
(accepted, but the answer never arrives), "error" (a permanent 400).
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import Field

from crosstrain import catalog
from crosstrain.backends.base import (
    Backend,
    Capabilities,
    HttpCall,
    JobHandle,
    JobState,
    JobStatus,
    Request,
)
from crosstrain.errors import SubmitError, TransientError
from crosstrain.settings import TargetSettings, setting
from crosstrain.spec import PoolView, TrainingJob

STATE_MAP = {
    "PENDING": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "DONE": JobState.SUCCEEDED,
    "ERROR": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
}


class FakeSettings(TargetSettings):
    root: str = setting(
        "~/.cache/crosstrain/fake-cloud",
        env=("CROSSTRAIN_FAKE_ROOT",),
        description="Directory that holds the fake cloud's jobs.",
    )
    outcome: Literal["succeeded", "failed"] = setting("succeeded", description="How every job ends.")
    queue_seconds: float = Field(0.0, ge=0, description="Seconds a job stays queued.")
    run_seconds: float = Field(0.0, ge=0, description="Seconds a job runs before it ends.")


class FakeCloud:
    """The fake platform's server side: answers the HTTP calls of a `Request` from files under their URLs."""

    def __init__(self, faults: Iterable[str] = (), clock: Any = time.time) -> None:
        self.faults = deque(faults)
        self.clock = clock
        self.received: list[HttpCall] = []

    def handle(self, call: HttpCall) -> tuple[int, dict[str, Any]]:
        self.received.append(call)
        fault = self.faults.popleft() if self.faults else None
        if fault == "refuse":
            raise TransientError("503 Service Unavailable", accepted=False)
        if fault == "rate-limit":
            raise TransientError("429 Too Many Requests", accepted=False, retry_after=2.0)
        if fault == "error":
            raise SubmitError("400 Bad Request: the fake cloud was told to refuse this call")
        path = Path(unquote(urlparse(call.url).path.removesuffix(":cancel")))
        if call.method == "PUT":
            code, record = self._create(path, call.body)
            if fault == "lose-response":
                raise TransientError("timed out reading the answer", accepted=None)
            return code, record
        record = self._read(path)
        if call.method == "POST" and call.url.endswith(":cancel"):
            if record.get("cancelTime") is None and self.native_state(record) in ("PENDING", "RUNNING"):
                record["cancelTime"] = self.clock()
                _write_atomic(path, record)
            return 200, record
        if call.method == "GET":
            return 200, record
        raise SubmitError(f"405: the fake cloud has no {call.method} {call.url}")

    def _create(self, path: Path, body: Any) -> tuple[int, dict[str, Any]]:
        if path.exists():
            return 200, self._read(path)
        record = {**body, "createTime": self.clock(), "cancelTime": None}
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(path, record)
        return 201, record

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            return data
        except FileNotFoundError:
            raise SubmitError(f"404: no job at {path}") from None

    def native_state(self, record: dict[str, Any]) -> str:
        plan = record["plan"]
        started = record["createTime"] + plan["queueSeconds"]
        ended = started + plan["runSeconds"]
        cancelled = record.get("cancelTime")
        now = self.clock()
        if cancelled is not None and cancelled < ended:
            return "CANCELLED"
        if now < started:
            return "PENDING"
        if now < ended:
            return "RUNNING"
        return "DONE" if plan["outcome"] == "succeeded" else "ERROR"


def _write_atomic(path: Path, record: dict[str, Any]) -> None:
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as out:
        json.dump(record, out, indent=2)
    os.replace(tmp, path)


class FakeBackend(Backend):
    """Runs nothing; keeps jobs as files. Example: `crosstrain submit job.yaml --target fake --wait`."""

    name = "fake"
    title = "Fake cloud (local directory)"
    settings_model = FakeSettings
    capabilities = Capabilities(
        per_pool_images=True,
        per_pool_machines=True,
        per_pool_commands=True,
        spot=True,
        logs=True,
        dedupes_create=True,
        frameworks=frozenset({"pytorch", "mpi", "tensorflow"}),
    )

    def _cloud(self) -> FakeCloud:
        return self.transport if isinstance(self.transport, FakeCloud) else FakeCloud()

    def _render(self, job: TrainingJob, settings: FakeSettings) -> Request:
        identity = self.identity(job, settings)
        root = Path(os.path.expanduser(settings.root)).absolute()
        body = {
            "identity": identity,
            "displayName": job.name,
            "labels": dict(job.labels),
            "pools": [_pool(pool, job) for pool in job.pools()],
            "launch": {"mode": job.launch.mode, "framework": job.launch.framework},
            "scheduling": job.scheduling.model_dump(mode="json", exclude_none=True),
            "plan": {
                "outcome": settings.outcome,
                "queueSeconds": settings.queue_seconds,
                "runSeconds": settings.run_seconds,
            },
        }
        url = (root / "jobs" / f"{identity}.json").as_uri()
        call = HttpCall(
            "PUT",
            url,
            body,
            {"Content-Type": "application/json"},
            purpose="create the job; a PUT of an existing identity returns that job",
        )
        return Request("fake", identity, job.name, (call,), settings.model_dump(mode="json"))

    def send(self, request: Request) -> JobHandle:
        cloud = self._cloud()
        call = request.create
        code, _ = self.retry.create(lambda: cloud.handle(call), dedupes=self.capabilities.dedupes_create)
        return JobHandle(
            "fake",
            request.identity,
            request.identity,
            console_url=call.url,
            ref={"url": call.url},
            adopted=code == 200,
        )

    def status(self, handle: JobHandle) -> JobStatus:
        cloud = self._cloud()
        _, record = cloud.handle(HttpCall("GET", handle.ref["url"]))
        native = cloud.native_state(record)
        message = "the plan said so (targets.fake.outcome: failed)" if native == "ERROR" else ""
        return JobStatus(STATE_MAP[native], native, message)

    def cancel(self, handle: JobHandle) -> None:
        self._cloud().handle(HttpCall("POST", handle.ref["url"] + ":cancel"))

    def logs(self, handle: JobHandle) -> Iterator[str]:
        from datetime import datetime, timezone

        cloud = self._cloud()
        _, record = cloud.handle(HttpCall("GET", handle.ref["url"]))
        plan, created = record["plan"], record["createTime"]
        events = [
            (created, "created"),
            (created + plan["queueSeconds"], "started"),
            (created + plan["queueSeconds"] + plan["runSeconds"], f"ended {plan['outcome']}"),
        ]
        if record.get("cancelTime") is not None:
            events.append((record["cancelTime"], "cancelled"))
        for when, what in sorted(events, key=lambda event: event[0]):
            if when <= cloud.clock():
                stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
                yield f"{stamp} {handle.identity} {what}"


def _pool(pool: PoolView, job: TrainingJob) -> dict[str, Any]:
    machine = pool.machine
    gpu = machine.accelerator if machine else None
    return {
        "role": pool.role,
        "replicas": pool.replicas,
        "image": pool.image,
        "command": pool.command,
        "args": pool.args,
        "env": pool.env,
        "machine": {
            "type": machine.type if machine else None,
            "gpu": catalog.canonical_gpu(gpu.type) if gpu else None,
            "gpuCount": gpu.count if gpu else 0,
        },
        "processesPerNode": job.processes_per_node(gpu.count if gpu else 0),
    }
