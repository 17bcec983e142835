"""The fake backend: the conformance suite, and the behaviour of its directory-backed cloud."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends.base import Backend
from crosstrain.backends.fake import STATE_MAP, FakeBackend, FakeCloud
from crosstrain.backends.loopback import LoopbackPlatform
from crosstrain.errors import JobFailed, WaitTimeout
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, SendConformance, merge


class TestFakeConformance(BackendConformance):
    target = "fake"
    settings = {"root": "/tmp/crosstrain-conformance"}
    refused = [
        ({"reduction_server": {"replicas": "auto"}}, "reduction server"),
        ({"parameter_servers": {"replicas": 2}}, "parameter servers"),
        ({"evaluators": {"replicas": 1}}, "evaluators"),
    ]


class FakePlatform(LoopbackPlatform):
    """The fake cloud in a folder; jobs end SUCCEEDED when they are read, unless cancelled first."""

    native_states = tuple(STATE_MAP)

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cloud = FakeCloud()
        self.settings = {"root": str(root), "run_seconds": 0.05}

    def backend(self) -> Backend[Any, Any]:
        return FakeBackend(cloud=self.cloud, retry=RetryPolicy(sleep=lambda s: None), environ={})

    def inject(self, operation: str, fault: str) -> None:
        if operation != "submit-read":
            self.cloud.inject({"create": "create", "poll": "get"}[operation], fault)

    def live_jobs(self, identity: str) -> list[str]:
        jobs = [FakeCloud._read(path) for path in (self.root / "jobs").glob("*.json")]
        return [job["identity"] for job in jobs if job["identity"] == identity and job["cancelTime"] is None]

    def set_state(self, handle: JobHandle, native: str) -> None:
        path = self.root / "jobs" / f"{handle.identity}.json"
        record = FakeCloud._read(path)
        outcome = {"ERROR": "failed", "DONE": "succeeded"}.get(native, record["plan"]["outcome"])
        hours = 3600.0 if native in ("PENDING", "RUNNING") else 0.0
        queue = hours if native == "PENDING" else 0.0
        record["plan"] |= {"outcome": outcome, "queueSeconds": queue, "runSeconds": hours}
        record["createTime"] = self.cloud.clock() - (1 if native == "RUNNING" else 0)
        record["cancelTime"] = record["createTime"] if native == "CANCELLED" else None
        path.write_text(json.dumps(record))

    def child_backend(self) -> str:
        return "from crosstrain.backends.fake import FakeBackend\nbackend = FakeBackend(environ={})\n"


class TestFakeSends(SendConformance):
    target = "fake"
    reads_in_submit = False

    @pytest.fixture
    def platform(self, tmp_path: Path) -> LoopbackPlatform:
        return FakePlatform(tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def submit(tmp_path: Path, cloud: FakeCloud, **settings: Any) -> tuple[Any, JobHandle]:
    backend = create_backend("fake", cloud=cloud, retry=RetryPolicy(sleep=lambda s: None), environ={})
    job = job_from_dict(BASE_JOB)
    return backend, backend.submit(job, {"root": str(tmp_path), **settings})


def test_job_moves_through_its_planned_states(tmp_path: Path) -> None:
    clock = Clock()
    backend, handle = submit(tmp_path, FakeCloud(clock=clock), queue_seconds=10, run_seconds=20, outcome="failed")
    assert backend.status(handle).state is JobState.QUEUED
    clock.now += 15
    assert backend.status(handle).state is JobState.RUNNING
    clock.now += 20
    status = backend.status(handle)
    assert (status.state, status.native_state) == (JobState.FAILED, "ERROR")
    assert "outcome" in status.message


def test_submit_writes_the_rendered_body(tmp_path: Path) -> None:
    cloud = FakeCloud()
    backend, handle = submit(tmp_path, cloud)
    request = backend.render(job_from_dict(BASE_JOB), {"root": str(tmp_path)})
    assert [(call.method, call.body) for call in cloud.received] == [("PUT", request.create.body)]
    stored = (tmp_path / "jobs" / f"{handle.identity}.json").read_text()
    assert '"displayName": "conformance-job"' in stored
    assert handle.console_url == request.create.url


def test_resubmitting_the_same_spec_adopts_the_existing_job(tmp_path: Path) -> None:
    _, first = submit(tmp_path, FakeCloud())
    _, second = submit(tmp_path, FakeCloud())
    assert (first.adopted, second.adopted) == (False, True)
    assert first == second
    assert len(list((tmp_path / "jobs").iterdir())) == 1


def test_cancel_stops_a_running_job_but_not_an_ended_one(tmp_path: Path) -> None:
    clock = Clock()
    backend, running = submit(tmp_path, FakeCloud(clock=clock), run_seconds=60)
    backend.cancel(running)
    clock.now += 100
    assert backend.status(running).state is JobState.CANCELLED
    assert any(line.endswith("cancelled") for line in backend.logs(running))

    backend, ended = submit(tmp_path / "other", FakeCloud(clock=clock))
    clock.now += 1
    backend.cancel(ended)
    assert backend.status(ended).state is JobState.SUCCEEDED


def test_wait_returns_on_success_and_raises_on_failure(tmp_path: Path) -> None:
    clock = Clock()
    cloud = FakeCloud(clock=clock)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    backend = create_backend("fake", cloud=cloud, retry=RetryPolicy(sleep=sleep), environ={})
    job = job_from_dict(BASE_JOB)
    handle = backend.submit(job, {"root": str(tmp_path), "run_seconds": 30})
    assert backend.wait(handle, poll_interval=5).state is JobState.SUCCEEDED
    assert sleeps[:3] == [5, 7.5, 11.25]

    failing = backend.submit(
        job_from_dict(merge(BASE_JOB, {"run_id": "f"})), {"root": str(tmp_path), "run_seconds": 30, "outcome": "failed"}
    )
    with pytest.raises(JobFailed, match="FAILED"):
        backend.wait(failing, poll_interval=5)


def test_wait_times_out_while_running(tmp_path: Path) -> None:
    backend, handle = submit(tmp_path, FakeCloud(), run_seconds=3600)
    backend.retry = RetryPolicy(sleep=lambda s: None)
    with pytest.raises(WaitTimeout, match="still RUNNING"):
        backend.wait(handle, timeout=0.0)


def test_handle_string_reconnects_in_a_new_backend(tmp_path: Path) -> None:
    _, handle = submit(tmp_path, FakeCloud())
    again = JobHandle.loads(str(handle))
    assert again == handle
    assert again.status().state is JobState.SUCCEEDED


def test_code_is_uploaded_once_by_its_digest_and_unpacks_to_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import tarfile

    from crosstrain import packaging

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (src / "pkg" / "util.py").write_text("X = 2\n")
    (src / "junk.log").write_text("noise\n")
    (src / ".crosstrainignore").write_text("*.log\n")
    monkeypatch.chdir(tmp_path)  # a job made in Python names its folder from the current one
    job = job_from_dict({"name": "shipped", "code": "src", "command": "python train.py"})
    settings = {"root": str(tmp_path / "cloud")}
    first = FakeBackend()
    handle = first.submit(job, settings)
    again = FakeBackend()
    assert again.submit(job, settings) == handle
    assert (first.uploads, again.uploads) == (1, 0)
    (archive,) = (tmp_path / "cloud" / "code").rglob(packaging.ARCHIVE_NAME)
    with tarfile.open(fileobj=io.BytesIO(archive.read_bytes())) as tar:
        prefix = "crosstrain_code-1.0/crosstrain_code/src/"
        shipped = {m.name.removeprefix(prefix) for m in tar.getmembers() if m.name.startswith(prefix)}
    assert shipped == {"train.py", "pkg/util.py", ".crosstrainignore"}
    whole = archive.read_bytes()
    archive.write_bytes(whole[:100])  # cut short: its name still says which bundle, its bytes do not
    third = FakeBackend()
    assert third.submit(job, settings) == handle
    assert third.uploads == 1
    assert archive.read_bytes() == whole
    (src / "train.py").write_text("print(2)\n")
    assert FakeBackend().submit(job, settings).identity != handle.identity  # new code, new job
