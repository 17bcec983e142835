"""`fake`: a cloud in a local directory, for tests, demos and CI dry runs of a pipeline's submit/wait steps.

It is a complete backend, not a mock: render produces the JSON body a job server would take, submit PUTs it
under `<root>/jobs/<identity>.json` (a PUT of an identity that exists returns the existing job, the way
platforms dedupe by idempotency token; submit then adopts it if its fingerprint is this request's, and
refuses otherwise), and the job's state follows the plan in its settings: queued for `queue_seconds`,
running for `run_seconds`, then `outcome`. `FakeCloud` is a `LoopbackService`, so its faults are those of
every platform fake: `cloud.inject("create", "drop")` and so on.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import Field

from crosstrain import catalog, packaging, pricing
from crosstrain.backends.base import Backend, Capabilities, Ids
from crosstrain.backends.loopback import TRICKLED_BYTES, Call, Dropped, LoopbackService, Reply
from crosstrain.errors import Problem, SubmitError, TransientError
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request
from crosstrain.secrets import SECRET_STORES
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
    # Finite: the request is JSON, which has no Infinity.
    queue_seconds: float = Field(0.0, ge=0, allow_inf_nan=False, description="Seconds a job stays queued.")
    run_seconds: float = Field(0.0, ge=0, allow_inf_nan=False, description="Seconds a job runs before it ends.")


class FakeCloud(LoopbackService):
    """The fake platform's server side: answers calls from files under their URLs' paths."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(slow_seconds=0.0, late_seconds=0.2)
        self.clock = clock

    def operation(self, call: Call) -> str:
        if call.method == "PUT":
            return "create"
        return "cancel" if call.path.endswith(":cancel") else "get"

    def answer(self, call: Call) -> Reply:
        path = Path(call.path.removesuffix(":cancel"))
        if call.method == "PUT":
            if path.exists():
                return Reply(200, self._read(path))
            record = {**call.body, "createTime": self.clock(), "cancelTime": None}
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomic(path, record)
            return Reply(201, record)
        if not path.exists():
            return self.error(404, f"no job at {path}")
        record = self._read(path)
        if call.method == "POST" and call.path.endswith(":cancel"):
            if record.get("cancelTime") is None and self.native_state(record) in ("PENDING", "RUNNING"):
                record["cancelTime"] = self.clock()
                _write_atomic(path, record)
            return Reply(200, record)
        if call.method == "GET":
            return Reply(200, record)
        return self.error(405, f"the fake cloud has no {call.method} {call.path}")

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(path.read_text())
        return data

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


class FakeBackend(Backend[FakeSettings, None]):
    """Runs nothing; keeps jobs as files. Example: `crosstrain submit job.yaml --target fake --wait`."""

    keeps_outputs_folder = True  # as the cloud it plays would
    pure_render = False  # a test double: each render is made afresh, as a test may change what it reads

    name = "fake"
    handle_ref = {"url": str}
    title = "Fake cloud (local directory)"
    settings_model = FakeSettings
    capabilities = Capabilities(
        per_pool_images=True,
        per_pool_machines=True,
        per_pool_commands=True,
        spot=True,
        logs=True,
        dedupes_create=True,
        frameworks=frozenset({"pytorch", "mpi", "tensorflow", "deepspeed", "horovod"}),
        secret_stores=frozenset(SECRET_STORES),  # it runs nothing: it keeps every reference as it is
        code=True,  # the archive is kept under the root, by its digest
        requirements=True,
        environments=True,
    )

    def cost(self, job: TrainingJob, settings: FakeSettings, plan: None) -> pricing.Cost:
        return pricing.free(self.name, "a cloud in a local directory", job.scheduling.timeout)

    def platform_refusals(self, job: TrainingJob, settings: FakeSettings) -> list[Problem]:
        return catalog.scale_tier_problems(job.pools(), self.name)

    def __init__(self, *, cloud: FakeCloud | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cloud = cloud or FakeCloud()
        self.uploads = 0  # archives this backend wrote (an unchanged re-submit writes none)

    def data_refusals(self, job: TrainingJob, settings: FakeSettings) -> list[Problem]:
        return []  # it runs nothing: every location is kept as written

    def node_path(self, job: TrainingJob, settings: FakeSettings, direction: str, name: str, location: Any) -> str:
        return location.path if location.path is not None else f"${{{direction}.{name}}}"

    def _render(self, job: TrainingJob, settings: FakeSettings, plan: None, ids: Ids) -> Request:
        root = Path(os.path.expanduser(settings.root)).absolute()
        body: dict[str, Any] = {
            "identity": ids.identity,
            "fingerprint": ids.fingerprint,
            "displayName": job.name,
            "labels": dict(job.labels),
            "pools": [_pool(pool, job) for pool in job.pools()],
            "launch": {"mode": job.launch.mode, "framework": job.launch.framework},
            **{
                direction: {name: _as_written(loc) for name, loc in declared.items()}
                for direction, declared in (("inputs", job.inputs), ("outputs", job.outputs))
                if declared
            },
            "scheduling": job.scheduling.model_dump(mode="json", exclude_none=True),
            "plan": {
                "outcome": settings.outcome,
                "queueSeconds": settings.queue_seconds,
                "runSeconds": settings.run_seconds,
            },
        }
        calls = []
        bundle = packaging.for_job(job)
        if bundle is not None:
            archive = root / "code" / bundle.short / packaging.ARCHIVE_NAME
            body["code"] = {"archive": archive.as_uri(), "sha256": bundle.digest}
            body["environment"] = job.environment
            calls.append(
                HttpCall(
                    "PUT",
                    archive.as_uri(),
                    {"archive": packaging.ARCHIVE_NAME, "sha256": bundle.digest, "files": len(bundle.files)},
                    purpose=f"upload the code archive ({bundle.describe()}) unless it is there already",
                )
            )
        url = (root / "jobs" / f"{ids.identity}.json").as_uri()
        calls.append(
            HttpCall(
                "PUT",
                url,
                body,
                {"Content-Type": "application/json"},
                purpose="create the job; a PUT of an existing identity returns that job",
            )
        )
        return Request(
            "fake",
            ids.identity,
            job.name,
            tuple(calls),
            settings.model_dump(mode="json"),
            code=bundle.ref if bundle else None,
        )

    def _call(self, method: str, url: str, body: Any = None, *, missing_ok: bool = False) -> Reply | None:
        """One call to the cloud, its failures as crosstrain's three kinds; None for a missing job if asked."""
        from crosstrain.adaptors.http import error_for_status, unreadable

        try:
            reply = self.cloud.dispatch(Call(method, unquote(urlparse(url).path), body=body))
        except OSError as exc:  # the fake cloud's store is a folder here: a full disk or a file in the way
            raise SubmitError(f"{method} {url}: the fake cloud's store failed: {exc.strerror or exc}") from None
        except Dropped:
            raise TransientError(f"{method} {url}: the connection closed with no answer", accepted=None) from None
        if reply.pace:  # an answer that trickles in: the fake cloud has no socket, so it stands for the wait
            time.sleep(reply.pace * TRICKLED_BYTES)
            raise TransientError(f"{method} {url}: the connection closed partway through the answer", accepted=None)
        if reply.status == 404 and missing_ok:
            return None
        message = f"{reply.status} from {method} {url}: {reply.body}"
        error = error_for_status(reply.status, message, reply.headers.get("Retry-After"))
        if error is not None:
            raise error
        if not isinstance(reply.body, dict):  # the cloud's answers are JSON objects: an empty or cut one is not
            raise unreadable(ValueError(f"not a JSON object: {reply.body!r:.80}"), f"{method} {url}")
        return reply

    def _record(self, method: str, url: str, body: Any = None) -> Reply:
        reply = self._call(method, url, body)
        assert reply is not None
        return reply

    def send(self, request: Request) -> JobHandle:
        call = request.create
        if request.code is not None:
            self._upload(request.code, request.calls[0].url)

        found: list[Reply] = []

        def find() -> Reply | None:
            reply = self._call("GET", call.url, missing_ok=True)
            found.extend([reply] if reply else [])
            return reply

        reply = self.retry.create(
            lambda: self._record("PUT", call.url, call.body),
            dedupes=self.capabilities.dedupes_create,
            find=find,
            identity=request.identity,
        )
        self.check_same_request(request, reply.body.get("fingerprint"), call.url)
        # A PUT answered 200 found an earlier job; a job found after a lost answer is taken as this submit's.
        adopted = reply.status == 200 and not any(reply is seen for seen in found)
        return JobHandle(
            "fake",
            request.identity,
            request.identity,
            console_url=call.url,
            ref={"url": call.url},
            adopted=adopted,
        )

    def _upload(self, code: packaging.CodeRef, url: str) -> None:
        """The archive at its content address, written once: a folder uploaded before is not sent again, unless
        what is there is not its archive (cut short or replaced: a name is no proof)."""
        path = Path(unquote(urlparse(url).path))
        archive = io.BytesIO()
        packaging.check_unchanged(code).write_archive(archive)
        with contextlib.suppress(OSError):
            if (
                path.is_file()
                and hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(archive.getvalue()).digest()
            ):
                return
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial.write_bytes(archive.getvalue())
            os.replace(partial, path)
        except OSError as exc:
            raise SubmitError(f"uploading {url}: the fake cloud's store failed: {exc.strerror or exc}") from None
        self.uploads += 1

    def status(self, handle: JobHandle) -> JobStatus:
        record = self.retry.poll(lambda: self._record("GET", handle.ref["url"])).body
        native = self.cloud.native_state(record)
        said = record.get("error")  # what the service said of a job it failed itself (no capacity, say)
        message = (said or "the plan said so (targets.fake.outcome: failed)") if native == "ERROR" else ""
        return JobStatus(STATE_MAP[native], native, message)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        settings = self.list_settings(overrides)
        root = Path(os.path.expanduser(settings.root)).absolute()
        records = []
        for path in (root / "jobs").glob("*.json"):
            try:
                records.append((json.loads(path.read_text()), path))
            except (OSError, ValueError):
                continue
        for record, path in sorted(records, key=lambda item: -float(item[0].get("createTime", 0))):
            native = self.cloud.native_state(record)
            url = path.as_uri()
            handle = JobHandle("fake", record["identity"], record["identity"], console_url=url, ref={"url": url})
            yield JobSummary(record["identity"], STATE_MAP[native], native, float(record["createTime"]), url, handle)

    def cancel(self, handle: JobHandle) -> None:
        self.retry.poll(lambda: self._record("POST", handle.ref["url"] + ":cancel"))

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        from datetime import datetime, timezone

        record = self.retry.poll(lambda: self._record("GET", handle.ref["url"])).body
        plan, created = record["plan"], record["createTime"]
        events = [
            (created, "created"),
            (created + plan["queueSeconds"], "started"),
            (created + plan["queueSeconds"] + plan["runSeconds"], f"ended {plan['outcome']}"),
        ]
        if record.get("cancelTime") is not None:
            events.append((record["cancelTime"], "cancelled"))
        for when, what in sorted(events, key=lambda event: event[0]):
            if when <= self.cloud.clock():
                stamp = datetime.fromtimestamp(when, timezone.utc).isoformat(timespec="seconds")
                yield f"{stamp} {handle.identity} {what}"


def _as_written(location: Any) -> dict[str, Any]:
    """A data location as the job wrote it: `outside_job_folder` only where it says so (it permits an upload
    the fake never makes)."""
    dumped: dict[str, Any] = location.model_dump(mode="json", exclude_none=True)
    if not dumped.get("outside_job_folder"):
        dumped.pop("outside_job_folder", None)
    return dumped


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
        # The fake runs nothing, so it keeps every store's reference as is: a reference, never a value.
        "secrets": {name: ref.secret for name, (ref, _) in sorted(pool.secrets.items())},
        "machine": {
            "type": machine.type if machine else None,
            "gpu": catalog.canonical_gpu(gpu.type) if gpu else None,
            "gpuCount": gpu.count if gpu else 0,
        },
        "processesPerNode": job.processes_per_node(gpu.count if gpu else 0),
    }
