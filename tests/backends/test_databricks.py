"""The databricks backend: render against the SDK's own request classes and golden files; the shared send
suite, and submit, wait, cancel and logs with the real `WorkspaceClient` talking to a loopback workspace
(databricks_workspace.py).

Regenerate the golden files with `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_databricks.py`.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from crosstrain import packaging
from crosstrain.backends.base import Backend
from crosstrain.backends.databricks.wire import runtime_bundle
from crosstrain.backends.local import inherited_environment
from crosstrain.backends.loopback import LoopbackPlatform
from crosstrain.databricks_task import DistributorCall
from crosstrain.errors import IdentityConflict, JobFailed, SpecError, SubmitError, TransientError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import JobState, Request
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, SendConformance, merge
from tests.backends.databricks_workspace import DatabricksPlatform, DatabricksWorkspace
from tests.backends.validators import violations

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_DIR = ROOT / "examples" / "databricks"
GOLDEN = Path(__file__).parent / "golden" / "databricks"
AWS = {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}


class TestDatabricksConformance(BackendConformance):
    target = "databricks"
    settings = AWS
    refused = [
        ({"reduction_server": {"replicas": 2}}, "reduction server"),
        ({"parameter_servers": {"replicas": 1}}, "parameter servers"),
        ({"workers": {"machine": "V100:8"}}, "runs one machine on every node"),
        ({"workers": {"image": "registry.example/other:2"}}, "runs one image on every node"),
        ({"network": "projects/p/global/networks/n"}, "network"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "CUDA_VISIBLE_DEVICES"),
        ({"command": ["torchrun", "--nproc-per-node=4", "train.py"]}, "TorchDistributor runs a Python file"),
        ({"primary": {"machine": "i3.xlarge"}}, "no GPU"),
        ({"launch": {"processes_per_node": 2}}, "one process per GPU"),
        ({"launch": {"mode": "per-node"}}, "cannot launch per-node"),
    ]
    # How submit authenticates says nothing about the job.
    unsent_settings: ClassVar[dict[str, Any]] = {"profile": "other"}


def backend(**kwargs: Any) -> Backend[Any, Any]:
    return create_backend("databricks", environ={}, **kwargs)


def render(job: dict[str, Any], **settings: Any) -> Request:
    return backend().render(job_from_dict(job), {**AWS, **settings})


# -- render ------------------------------------------------------------------------------------------------
def _golden_cases() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """name -> (job, settings). The example's own job file is rendered separately (it uploads train.py)."""
    return {
        "image-multinode-azure": (
            merge(BASE_JOB, {"primary": {"machine": "A100-80GB:4"}, "scheduling": {"max_restarts": 1}}),
            {"host": "https://adb-1234567890123456.7.azuredatabricks.net"},
        ),
        "single-node-gcp": (
            {
                "name": "single-node",
                "command": "python -m trainer.main --steps 100",
                "primary": {"machine": "H100:8"},
                "identity": "trainer@example.com",
            },
            {"host": "https://1234567890123456.7.gcp.databricks.com"},
        ),
        "secrets-aws": (
            {
                "name": "with-secrets",
                "command": "python -m trainer.main",
                "primary": {"machine": "A10G:4"},
                "env": {"HF_TOKEN": {"secret": "ml-scope/hf-token"}, "LOG_LEVEL": "info"},
            },
            AWS,
        ),
        "spot-aws-volume": (
            {
                "name": "spot-run",
                "command": ["python", "/Volumes/main/default/code/train.py", "--lr=0.01"],
                "primary": {"machine": "A10G:4"},
                "workers": {"replicas": 3},
                "scheduling": {"spot": True, "timeout": "12h"},
                "identity": "6f2c1a9e-0d8b-4f7c-9e3a-5b1d2c3e4f5a",
            },
            {**AWS, "libraries": ["transformers==4.46.0"]},
        ),
    }


def _example(monkeypatch: pytest.MonkeyPatch) -> Request:
    monkeypatch.chdir(EXAMPLE_DIR)
    return backend().render(load_job("job.yaml"))


def _all_rendered(monkeypatch: pytest.MonkeyPatch) -> dict[str, Request]:
    rendered = {name: backend().render(job_from_dict(job), s) for name, (job, s) in _golden_cases().items()}
    data = backend().render(load_job(ROOT / "examples" / "databricks-data.yaml"))
    return {"example-aws": _example(monkeypatch), "data-aws": data, **rendered}


def _stable(request: Request) -> str:
    """The request as JSON, with what changes with every edit of crosstrain's runtime (the runtime bundle's
    digest, its launcher's sha256 and sizes) replaced by placeholders, so the golden files review the shape."""
    runtime = runtime_bundle()
    data = request.to_dict()
    for call in data["calls"]:
        content = (call.get("body") or {}).get("content")
        if isinstance(content, dict):
            for key in ("sha256", "sha256 of the bundle", "bytes", "user bytes"):
                if key in content:
                    content[key] = f"<{key}>"
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return text.replace(runtime.short, "<runtime bundle>")


def test_golden_files(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, request in _all_rendered(monkeypatch).items():
        text = _stable(request)
        path = GOLDEN / f"{name}.json"
        if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} differs; regenerate with CROSSTRAIN_UPDATE_GOLDEN=1"


def test_bodies_round_trip_through_the_sdk_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, request in _all_rendered(monkeypatch).items():
        assert not violations(request), name  # SubmitTask, JobRunAs, jobs.submit's fields, ImportFormat


def test_a_two_gpu_job_is_the_seed_example() -> None:
    """Databricks' guide: `TorchDistributor(num_processes=2, local_mode=False, use_gpu=True).run(train_file, *args)`."""
    train_file, args = "/Workspace/Users/me@example.com/train.py", ["--learning_rate=0.001", "--batch_size=16"]
    job = {"name": "seed", "command": ["python", train_file, *args], "primary": {"machine": "T4:1"}}
    task = render({**job, "workers": {"replicas": 1}}).create.body["tasks"][0]
    call = DistributorCall.parse(task["spark_python_task"]["parameters"])
    assert (call.num_processes, call.local_mode, call.use_gpu) == (2, False, True)
    assert (call.kind, call.target, list(call.args)) == ("file", train_file, args)
    cluster = task["new_cluster"]
    assert cluster["num_workers"] == 2
    assert cluster["spark_conf"] == {"spark.task.resource.gpu.amount": "1"}
    assert cluster["node_type_id"] == "g4dn.xlarge"


def test_cluster_shape_follows_the_job() -> None:
    multi = render(merge(BASE_JOB, {"primary": {"machine": "A100:8"}, "image": None})).create.body["tasks"][0]
    call = DistributorCall.parse(multi["spark_python_task"]["parameters"])
    assert (call.num_processes, call.local_mode, call.use_gpu, call.kind) == (24, False, True, "module")
    cluster = multi["new_cluster"]
    assert (cluster["node_type_id"], cluster["driver_node_type_id"], cluster["num_workers"]) == (
        "p4d.24xlarge",
        "g4dn.xlarge",  # A100 has no one-GPU AWS type: the driver is a small T4
        3,
    )
    assert cluster["spark_version"] == "17.3.x-gpu-ml-scala2.13"
    assert "docker_image" not in cluster

    single = render({"name": "one", "command": "python -m t", "primary": {"machine": "A10G:4"}})
    single_task = single.create.body["tasks"][0]
    call = DistributorCall.parse(single_task["spark_python_task"]["parameters"])
    assert (call.num_processes, call.local_mode, call.use_gpu) == (4, True, False)
    assert single_task["new_cluster"]["num_workers"] == 0
    assert single_task["new_cluster"]["custom_tags"]["ResourceClass"] == "SingleNode"
    assert single_task["new_cluster"]["spark_env_vars"] == {"NCCL_P2P_DISABLE": "1"}

    image = render(BASE_JOB)
    cluster = image.create.body["tasks"][0]["new_cluster"]
    assert cluster["docker_image"] == {"url": BASE_JOB["image"]}
    assert cluster["spark_version"] == "17.3.x-scala2.13"
    assert any("Container Services" in note and "torch, CUDA, NCCL" in note for note in image.notes)


def test_the_cloud_comes_from_the_host_or_the_setting() -> None:
    job = merge(BASE_JOB, {"primary": {"machine": "A100-80GB:1"}})
    azure = render(job, host="adb-1.2.azuredatabricks.net").create.body["tasks"][0]["new_cluster"]
    assert azure["node_type_id"] == "Standard_NC24ads_A100_v4"
    gcp = render(job, host="https://example.internal", cloud="gcp").create.body["tasks"][0]["new_cluster"]
    assert gcp["node_type_id"] == "a2-ultragpu-1g"
    with pytest.raises(Unsupported, match="cannot tell the cloud"):
        render(job, host="https://example.internal")
    with pytest.raises(SpecError) as bad:
        render(job, host="https://dbc-1.cloud.databricks.com/some/path")
    assert bad.value.problems[0].path == "targets.databricks.host"


def test_a_local_training_file_is_uploaded_and_moves_the_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('v1')\n")
    job = {"name": "up", "command": "python train.py --x 1", "primary": {"machine": "T4:1"}}
    first = render(job)
    *_, check, mkdirs, upload, submit = first.calls
    assert check.method == "GET"
    sha = hashlib.sha256(b"print('v1')\n").hexdigest()[:16]
    assert mkdirs.body == {"path": f"/Workspace/Shared/crosstrain/{first.identity}/{sha}"}
    assert upload.body["path"] == f"/Workspace/Shared/crosstrain/{first.identity}/{sha}/train.py"
    assert upload.body["content"] == "cHJpbnQoJ3YxJykK"  # base64 of the file
    params = submit.body["tasks"][0]["spark_python_task"]["parameters"]
    assert DistributorCall.parse(params).target == upload.body["path"]

    (tmp_path / "train.py").write_text("print('v2')\n")
    assert render(job).identity != first.identity
    with pytest.raises(Unsupported, match="neither a file here nor a path on the cluster"):
        render({**job, "command": "python missing.py"})


def test_a_symlink_out_of_the_job_folder_is_never_uploaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's probe: `train.py` linked to ~/.aws/credentials was uploaded and printed base64."""
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("aws_secret_access_key = SECRET\n")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "train.py").symlink_to(tmp_path / ".aws" / "credentials")
    monkeypatch.chdir(job_dir)
    with pytest.raises(Unsupported) as refused:
        render({"name": "up", "command": "python train.py", "primary": {"machine": "T4:1"}})
    (problem,) = refused.value.problems
    assert problem.path == "command"
    assert "train.py is a symlink to" in problem.message
    assert str(tmp_path / ".aws" / "credentials") in problem.message
    assert "copy the file you mean" in problem.fix
    assert "SECRET" not in str(refused.value)
    (tmp_path / "secret.py").write_text("TOKEN = 'SECRET'\n")
    with pytest.raises(Unsupported, match="outside the job's folder"):
        render({"name": "up", "command": "python ../secret.py", "primary": {"machine": "T4:1"}})


def test_a_local_path_outside_the_job_folder_is_an_image_path_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "elsewhere.py").write_text("print('not meant')\n")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    monkeypatch.chdir(job_dir)
    outside = str(tmp_path / "elsewhere.py")
    in_image = render({**BASE_JOB, "command": ["python", outside], "primary": {"machine": "T4:1"}})
    assert not any(outside in json.dumps(c.body) for c in in_image.calls[:-1]), "the image's own file"
    with pytest.raises(Unsupported, match="outside the job's folder"):
        render({"name": "up", "command": ["python", outside], "primary": {"machine": "T4:1"}})


def test_the_workspace_import_limit_is_checked_at_render(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """10 MB of base64 content per import: a file of 7,500,000 bytes fits, one more byte does not."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "big.py").write_bytes(b"#" * 7_500_000)
    (tmp_path / "bigger.py").write_bytes(b"#" * 7_500_001)
    job = {"name": "big", "command": "python big.py", "primary": {"machine": "T4:1"}}
    upload = render(job).calls[-2].body
    assert len(upload["content"]) == 10_000_000
    with pytest.raises(Unsupported) as refused:
        render({**job, "command": "python bigger.py"})
    (problem,) = refused.value.problems
    assert problem.path == "command"
    assert "bigger.py is 7,500,001 bytes" in problem.message
    assert "at most 10 MB of base64 content" in problem.message
    assert "at most 7,500,000 bytes" in problem.message
    assert "/Volumes/" in problem.fix


@pytest.mark.parametrize("folder", ["/Workspace/../..", "/Workspace/Shared/../../etc", "/Workspace//x", "/Repos/x"])
def test_a_workspace_dir_that_leaves_the_workspace_is_refused(folder: str) -> None:
    with pytest.raises(SpecError) as refused:
        render(BASE_JOB, workspace_dir=folder)
    (problem,) = refused.value.problems
    assert problem.path == "targets.databricks.workspace_dir"
    assert folder in problem.message
    assert problem.fix
    assert "see `crosstrain schema`" not in problem.fix


# -- submit, wait, cancel, logs through the real WorkspaceClient ---------------------------------------------
@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient Databricks credentials or profiles: the test's client is the only one."""
    for name in list(os.environ):
        if name.startswith("DATABRICKS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def platform(clean_env: None) -> Iterator[DatabricksPlatform]:
    with DatabricksPlatform() as running:
        yield running


class TestDatabricksSends(SendConformance):
    target = "databricks"
    reports_adoption = False  # runs/submit answers a known token exactly as a new one

    @pytest.fixture
    def platform(self, clean_env: None) -> Iterator[LoopbackPlatform]:
        with DatabricksPlatform() as running:
            yield running


def sent(workspace: DatabricksWorkspace) -> list[tuple[str, str, Any]]:
    """The API calls the workspace received (the client's host-metadata probe left out)."""
    return [(c.method, c.path, c.body) for c in workspace.received if workspace.operation(c) != "metadata"]


def test_submit_sends_exactly_the_rendered_calls(platform: DatabricksPlatform, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLE_DIR)
    backend = platform.backend()
    request = backend.render(load_job("job.yaml"), platform.settings)
    handle = backend.send(request)
    posts = [(method, path, body) for method, path, body in sent(platform.workspace) if method == "POST"]
    json_posts = [c for c in request.calls if c.method == "POST" and isinstance(c.body.get("content", ""), str)]
    assert [p for p in posts if isinstance(p[2], dict)] == [
        ("POST", call.url.removeprefix(platform.url), call.body) for call in json_posts
    ]
    assert platform.workspace.submits()[0]["idempotency_token"] == request.identity
    assert [(c.method, c.path) for c in platform.workspace.received][-1] == ("GET", "/api/2.2/jobs/runs/get")
    assert handle.job_id == "1000"
    assert handle.console_url.endswith("#job/runs/1000")
    assert handle.ref["host"] == platform.url
    upload = request.calls[-2].body
    assert platform.workspace.files[upload["path"]] == base64.b64decode(upload["content"])
    assert len(platform.workspace.files) == 3, "the archive, the launcher and train.py"


@pytest.mark.parametrize("fault", ["slow", "refuse", "rate-limit", "drop", "error", "late"])
def test_a_retried_submit_resends_the_same_body_and_makes_one_run(platform: DatabricksPlatform, fault: str) -> None:
    platform.inject("create", fault)
    backend = platform.backend()
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    handle = backend.send(request)
    platform.settle()
    submits = platform.workspace.submits()
    assert len(submits) == 2, "crosstrain resends the POST once after this fault"
    assert submits[0] == submits[1] == request.create.body
    assert list(platform.workspace.runs) == [int(handle.job_id)]


def test_the_sdk_makes_one_request_per_attempt_of_the_policy(platform: DatabricksPlatform) -> None:
    """The SDK would retry 503 by itself for five minutes; crosstrain's policy decides, one request a try."""
    for _ in range(3):
        platform.inject("create", "refuse")
    backend = platform.backend()
    backend.retry = RetryPolicy(attempts=3, sleep=lambda s: None, call_timeout=platform.call_timeout)
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    with pytest.raises(TransientError) as refused:
        backend.send(request)
    assert refused.value.accepted is False
    assert len(platform.workspace.submits()) == 3
    assert not platform.workspace.runs


def test_a_read_inside_submit_that_keeps_failing_says_the_run_exists(platform: DatabricksPlatform) -> None:
    for _ in range(6):
        platform.inject("submit-read", "error")
    backend = platform.backend()
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    with pytest.raises(SubmitError) as failed:
        backend.send(request)
    assert failed.value.job_may_exist
    assert "run 1000 was submitted" in str(failed.value)
    handle = backend.send(request)  # submitting again adopts it
    assert handle.job_id == "1000"
    assert len(platform.workspace.runs) == 1


def test_the_run_carries_the_fingerprint_and_the_identity(platform: DatabricksPlatform) -> None:
    backend = platform.backend()
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    handle = backend.send(request)
    run = platform.workspace.get_run(int(handle.job_id))
    tags = run["tasks"][0]["new_cluster"]["custom_tags"]
    assert tags["crosstrain_job"] == request.identity
    assert tags["crosstrain_fingerprint"] == request.fingerprint


def test_a_run_without_a_fingerprint_is_not_adopted(platform: DatabricksPlatform) -> None:
    """A run made by an older crosstrain (no fingerprint tag) under the same token is refused, not adopted."""
    backend = platform.backend()
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    old = json.loads(json.dumps(request.create.body))
    del old["tasks"][0]["new_cluster"]["custom_tags"]["crosstrain_fingerprint"]
    platform.workspace.submit(old)
    with pytest.raises(IdentityConflict, match="missing"):
        backend.send(request)
    assert len(platform.workspace.runs) == 1


def test_a_changed_file_under_a_fixed_run_id_never_overwrites_the_runs_file(
    platform: DatabricksPlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    job = {"name": "up", "command": "python train.py", "primary": {"machine": "T4:1"}, "run_id": "fixed"}
    backend = platform.backend()
    (tmp_path / "train.py").write_text("print('v1')\n")
    first = backend.render(job_from_dict(job), platform.settings)
    handle = backend.send(first)
    (tmp_path / "train.py").write_text("print('v2')\n")
    second = backend.render(job_from_dict(job), platform.settings)
    assert second.identity == first.identity
    assert second.fingerprint != first.fingerprint
    with pytest.raises(IdentityConflict) as refused:
        backend.send(second)
    assert refused.value.found == first.fingerprint
    v1, v2 = first.calls[-2].body, second.calls[-2].body
    assert v1["path"] != v2["path"]
    assert platform.workspace.files[v1["path"]] == b"print('v1')\n", "the run's own file is untouched"
    assert platform.live_jobs(first.identity) == [handle.job_id]


def test_an_edited_request_uploads_nowhere_but_its_workspace_folder(
    platform: DatabricksPlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('v1')\n")
    backend = platform.backend()
    request = backend.render(
        job_from_dict({"name": "up", "command": "python train.py", "primary": {"machine": "T4:1"}}), platform.settings
    )
    for path in ("/Workspace/Shared/crosstrain/../../Users/someone/train.py", "/Workspace/Users/someone/train.py"):
        edited = request.to_dict()
        edited["calls"][-2]["body"]["path"] = path
        with pytest.raises(SpecError) as refused:
            backend.send(Request.from_dict(edited))
        assert refused.value.problems[0].path == f"calls[{len(request.calls) - 2}].body.path"
    assert sent(platform.workspace) == [], "refused before anything was sent"


@pytest.mark.parametrize(
    ("result", "expected"),
    [("FAILED", JobState.FAILED), ("TIMEDOUT", JobState.FAILED), ("CANCELED", JobState.CANCELLED)],
)
def test_wait_outlasts_the_sdk_default_and_fails_on_a_failed_result(
    platform: DatabricksPlatform, result: str, expected: JobState
) -> None:
    platform.workspace.states = [("PENDING", None)] * 3 + [("RUNNING", None)] * 60 + [("TERMINATED", result)]
    slept: list[float] = []
    db = platform.backend()
    db.retry = RetryPolicy(sleep=slept.append)
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    with pytest.raises(JobFailed, match=f"{expected.value} \\(TERMINATED/{result}\\)"):
        db.wait(handle)
    assert sum(slept) > 20 * 60, "the SDK's own wait would have given up after 20 minutes"


def test_a_500_on_every_other_poll_never_fails_wait(platform: DatabricksPlatform) -> None:
    platform.workspace.states = [("RUNNING", None)] * 6 + [("TERMINATED", "SUCCESS")]
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    for _ in range(4):
        platform.inject("poll", "error")
        platform.inject("poll", "error")
    status = db.wait(handle, poll_interval=0.0)
    assert (status.state, status.native_state) == (JobState.SUCCEEDED, "TERMINATED/SUCCESS")


def test_logs_read_the_task_runs_output(platform: DatabricksPlatform) -> None:
    platform.workspace.output = {"logs": "rank 0: loss 1.0 -> 0.1", "error": "Exception: rank 1 failed"}
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    platform.inject("output", "error")
    assert list(db.logs(handle)) == ["[driver] rank 0: loss 1.0 -> 0.1", "error: Exception: rank 1 failed"]
    output_ids = [c.query["run_id"] for c in platform.workspace.received if c.path.endswith("get-output")]
    assert output_ids == [str(platform.workspace.runs[int(handle.job_id)]["task_run_id"])] * 2


def test_cancel_cancels_the_run(platform: DatabricksPlatform) -> None:
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    platform.inject("cancel", "refuse")
    db.cancel(handle)
    assert ("POST", "/api/2.2/jobs/runs/cancel", {"run_id": int(handle.job_id)}) in sent(platform.workspace)
    assert db.status(handle).state is JobState.CANCELLED


# -- the adaptor's mapping of the SDK's errors ---------------------------------------------------------------
def test_sdk_errors_map_by_the_status_their_class_stands_for() -> None:
    from databricks.sdk.errors import base
    from databricks.sdk.errors import platform as errors

    from crosstrain.adaptors.databricks import translate

    def kind(error: BaseException) -> str:
        mapped = translate(error, "call")
        if isinstance(mapped, TransientError):
            return "refused" if mapped.accepted is False else "unknown"
        return "final" if mapped is not None else "raised"

    assert kind(errors.InternalError("boom")) == "unknown"  # 500
    assert kind(errors.Unknown("boom")) == "unknown"  # a subclass of 500's class
    assert kind(errors.DeadlineExceeded("late")) == "unknown"  # 504
    assert kind(errors.TemporarilyUnavailable("busy", retry_after_secs=1)) == "refused"  # 503
    assert kind(errors.RequestLimitExceeded("slow down", retry_after_secs=2)) == "refused"  # 429 by error_code
    assert kind(errors.InvalidParameterValue("bad")) == "final"  # 400
    assert kind(errors.PermissionDenied("no")) == "final"  # 403
    assert kind(errors.ResourceConflict("taken")) == "final"  # 409
    assert kind(base.DatabricksError("bad gateway", error_code="BAD_GATEWAY")) == "unknown"  # 502: no class
    assert kind(base.DatabricksError("throttled", retry_after_secs=1)) == "refused"
    assert kind(ConnectionRefusedError("refused")) == "refused"
    assert kind(KeyError("a bug")) == "raised"
    limited = translate(errors.TooManyRequests("slow down", retry_after_secs=7), "call")
    assert isinstance(limited, TransientError)
    assert limited.retry_after == 7


def test_a_client_that_cannot_authenticate_is_a_submit_error(clean_env: None) -> None:
    from crosstrain.adaptors.databricks import workspace_client

    with pytest.raises(SubmitError, match="DATABRICKS_TOKEN"):
        workspace_client("https://127.0.0.1:1", timeout=1.0)


@pytest.mark.parametrize("example", sorted(ROOT.glob("examples/**/*.yaml")), ids=lambda p: p.stem)
def test_every_example_renders_or_is_refused_with_reasons(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example.parent)
    problems: tuple[Any, ...] = ()
    try:
        backend().render(load_job(example), {} if "databricks" in load_job(example).targets else AWS)
    except Unsupported as refused:
        problems = refused.problems
    assert all(p.path and p.fix for p in problems)


def test_a_run_whose_cluster_is_not_reported_is_adopted_unchecked(platform: DatabricksPlatform) -> None:
    backend = platform.backend()
    request = backend.render(job_from_dict(BASE_JOB), platform.settings)
    first = backend.send(request)
    for run in platform.workspace.runs.values():
        for task in run.get("tasks", []):
            task.pop("new_cluster", None)
    assert backend.send(request).job_id == first.job_id


# -- the code bundle -----------------------------------------------------------------------------------------
def _project(root: Path) -> Path:
    """A job file beside a multi-file code folder: train.py imports a helper from a subpackage."""
    src = root / "src"
    (src / "pkg" / "helpers").mkdir(parents=True)
    (src / "train.py").write_text("from pkg.helpers.util import greet\nprint(greet())\n")
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "helpers" / "__init__.py").write_text("")
    (src / "pkg" / "helpers" / "util.py").write_text("def greet():\n    return 'hello'\n")
    (src / ".gitignore").write_text("*.log\ndata/\n")
    (src / "run.log").write_text("ignored\n")
    (src / "data").mkdir()
    (src / "data" / "big.bin").write_bytes(b"\0" * 1000)
    job = root / "job.yaml"
    job.write_text(
        "name: multi\ncode: ./src\nrequirements: [torchmetrics==1.4.0]\ncommand: python train.py --x 1\n"
        "primary: {machine: 'T4:1'}\nworkers: {replicas: 1}\n"
    )
    return job


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {
            m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_a_code_job_uploads_its_bundle_once_and_the_archive_holds_exactly_its_files(
    platform: DatabricksPlatform, tmp_path: Path
) -> None:
    job = load_job(_project(tmp_path))
    backend = platform.backend()
    request = backend.render(job, platform.settings)
    task = request.create.body["tasks"][0]
    assert task["libraries"] == [{"pypi": {"package": "torchmetrics==1.4.0"}}]
    call = DistributorCall.parse(task["spark_python_task"]["parameters"])
    bundle = packaging.for_job(job)
    assert bundle is not None
    folder = f"/Workspace/Shared/crosstrain/code/{bundle.short}"
    assert task["spark_python_task"]["python_file"] == f"{folder}/crosstrain_task.py"
    assert (call.code, call.kind, call.target, call.args) == (
        f"{folder}/crosstrain_code-1.0.tar.gz",
        "file",
        "train.py",
        ("--x", "1"),
    )
    backend.send(request)
    uploads = [c for c in platform.workspace.received if c.path.endswith(("/import", "/mkdirs"))]
    assert len(uploads) == 3  # mkdirs, the archive, the launcher
    files = dict(platform.workspace.files)
    assert set(files) == {f"{folder}/crosstrain_code-1.0.tar.gz", f"{folder}/crosstrain_task.py"}
    launcher = (Path(packaging.__file__).parent / "databricks_task.py").read_bytes()
    assert files[f"{folder}/crosstrain_task.py"] == launcher
    members = _members(files[f"{folder}/crosstrain_code-1.0.tar.gz"])
    user = {k.removeprefix("crosstrain_code/src/"): v for k, v in members.items() if "/src/" in k}
    local = {
        str(p.relative_to(tmp_path / "src")): p.read_bytes()
        for p in (tmp_path / "src").rglob("*")
        if p.is_file() and p.name != "run.log" and "data" not in p.parts
    }
    assert user == local
    assert members["crosstrain_code/crosstrain/databricks_task.py"] == launcher

    before = len(platform.workspace.received)
    again = platform.backend()
    again.send(again.render(load_job(tmp_path / "job.yaml"), platform.settings))
    after = [(c.method, c.path) for c in platform.workspace.received[before:] if c.path.startswith("/api/2.0/")]
    read_back = [("GET", "/api/2.0/workspace/get-status"), ("GET", "/api/2.0/workspace/export")]
    assert after == read_back * 2, "a re-submit uploads nothing: it reads each object back"
    assert platform.workspace.files == files


@pytest.mark.parametrize("where", ["workspace", "volume"])
def test_an_uploaded_object_that_was_truncated_or_replaced_is_uploaded_again(
    platform: DatabricksPlatform, tmp_path: Path, where: str
) -> None:
    """Its name is its content's digest, but a name is no proof: the archive cut short and the launcher replaced
    by other bytes of the same size are both uploaded again, not run."""
    job = load_job(_project(tmp_path))
    settings = {**platform.settings, **({"volume": "/Volumes/main/ml/code"} if where == "volume" else {})}
    backend = platform.backend()
    backend.send(backend.render(job, settings))
    made = dict(platform.workspace.files)
    archive = next(path for path in made if path.endswith(".tar.gz"))
    launcher = next(path for path in made if path.endswith("crosstrain_task.py"))
    platform.workspace.files[archive] = made[archive][:100]
    platform.workspace.files[launcher] = b"#" * len(made[launcher])
    backend.send(backend.render(job, settings))
    assert platform.workspace.files == made


def test_a_volume_takes_the_archive_through_the_files_api(platform: DatabricksPlatform, tmp_path: Path) -> None:
    job = load_job(_project(tmp_path))
    backend = platform.backend()
    request = backend.render(job, {**platform.settings, "volume": "/Volumes/main/ml/code/"})
    bundle = packaging.for_job(job)
    assert bundle is not None
    archive = f"/Volumes/main/ml/code/code/{bundle.short}/crosstrain_code-1.0.tar.gz"
    put = next(c for c in request.calls if c.method == "PUT" and "/fs/files/" in c.url)
    assert put.url == f"{platform.url}/api/2.0/fs/files{archive}?overwrite=true"
    backend.send(request)
    assert _members(platform.workspace.files[archive]) == _members(bundle.archive())
    assert f"/Volumes/main/ml/code/code/{bundle.short}" in platform.workspace.folders
    params = request.create.body["tasks"][0]["spark_python_task"]["parameters"]
    assert DistributorCall.parse(params).code == archive
    before = len(platform.workspace.received)
    backend.send(request)
    after = [(c.method, c.path) for c in platform.workspace.received[before:] if c.path.startswith("/api/2.0/")]
    assert after == [
        ("HEAD", f"/api/2.0/fs/files{archive}"),
        ("GET", f"/api/2.0/fs/files{archive}"),
        ("GET", "/api/2.0/workspace/get-status"),
        ("GET", "/api/2.0/workspace/export"),
    ]


def test_a_bundle_in_the_workspace_is_uploaded_again_to_a_new_volume(
    platform: DatabricksPlatform, tmp_path: Path
) -> None:
    """Each upload is checked at its own destination: the launcher being there says nothing of the volume."""
    job = load_job(_project(tmp_path))
    backend = platform.backend()
    backend.send(backend.render(job, platform.settings))
    backend.send(backend.render(job, {**platform.settings, "volume": "/Volumes/main/ml/code"}))
    assert sum(path.endswith(".tar.gz") for path in platform.workspace.files) == 2


def test_an_archive_over_the_import_limit_names_the_volume_fix(tmp_path: Path) -> None:
    job = _project(tmp_path)
    (tmp_path / "src" / "weights.bin").write_bytes(os.urandom(7_600_000))  # incompressible
    with pytest.raises(Unsupported) as refused:
        backend().render(load_job(job), AWS)
    (problem,) = refused.value.problems
    assert problem.path == "code"
    assert "at most 10 MB of base64 content" in problem.message
    assert "targets.databricks.volume" in problem.fix
    assert backend().render(load_job(job), {**AWS, "volume": "/Volumes/main/ml/code"})
    with pytest.raises(SpecError, match="not a Unity Catalog volume"):
        backend().render(load_job(job), {**AWS, "volume": "/Workspace/x"})


def test_relative_paths_resolve_against_the_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = _project(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    here = backend().render(load_job(job), AWS)
    monkeypatch.chdir(tmp_path)
    assert backend().render(load_job("job.yaml"), AWS).to_dict() == here.to_dict()
    with pytest.raises(Unsupported, match="not in the code folder"):
        backend().render(load_job(job).model_copy(update={"command": ["python", "no.py"]}), AWS)


@pytest.mark.parametrize(
    ("environment", "spark_version", "expected"),
    [
        ("pytorch", None, "17.3.x-gpu-ml-scala2.13"),
        ("pytorch:2.3", None, "15.4.x-gpu-ml-scala2.12"),
        ("pytorch:2.3", "16.4.x-gpu-ml-scala2.12", "16.4.x-gpu-ml-scala2.12"),  # the direct form wins
        (None, None, "17.3.x-gpu-ml-scala2.13"),
    ],
)
def test_the_environment_picks_the_ml_runtime(
    environment: str | None, spark_version: str | None, expected: str
) -> None:
    job = {"name": "env", "command": "python -m t", "primary": {"machine": "T4:1"}, "environment": environment}
    request = render(job, spark_version=spark_version)
    assert request.create.body["tasks"][0]["new_cluster"]["spark_version"] == expected


def test_an_environment_databricks_lacks_is_refused() -> None:
    with pytest.raises(Unsupported) as refused:
        render({"name": "env", "command": "python -m t", "primary": {"machine": "T4:1"}, "environment": "pytorch:1.0"})
    (problem,) = refused.value.problems
    assert problem.path == "environment"
    assert "pytorch:2.7" in problem.message
    assert "targets.databricks.spark_version" in problem.fix


def test_upgrading_crosstrain_names_no_new_run_of_a_job_without_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from crosstrain.backends.databricks import wire

    before = render(BASE_JOB)
    original = wire.runtime_bundle()
    moved = dataclasses.replace(original, digest="f" * 64)
    monkeypatch.setattr(wire, "runtime_bundle", lambda: moved)
    after = render(BASE_JOB)
    assert json.dumps(after.to_dict()) != json.dumps(before.to_dict())
    assert (after.identity, after.fingerprint) == (before.identity, before.fingerprint)


SRC = ROOT / "src"


def _without_this_checkout(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with this checkout's src/ left off PYTHONPATH: a stock Python must not find crosstrain there."""
    env = dict(environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SRC]
    env.pop("PYTHONPATH", None)
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def test_the_multifile_example_trains_under_databricks_emulation_with_a_stock_python(stock_python: Path) -> None:
    """`crosstrain run --emulate databricks`: the rendered run's launcher starts from the staged archive, and
    TorchDistributor's Spark workers run a Python without crosstrain (the rank function travels by value)."""
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no Java for the local SparkSession")
    pytest.importorskip("pyspark")
    job = ROOT / "examples" / "databricks-multifile" / "job.yaml"
    args = ["run", str(job), "--local", "--emulate", "databricks", "--set", f"python={stock_python}"]
    # The CLI imports this checkout by path, so the processes it starts inherit no PYTHONPATH to it.
    cli = f"import sys; sys.path.insert(0, {str(SRC)!r}); from crosstrain.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", cli, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=_without_this_checkout(inherited_environment(os.environ)),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    output = done.stdout + done.stderr  # the processes' lines, wherever this version streams them
    losses = dict(re.findall(r"rank (\d)/2: loss [\d.]+ -> ([\d.]+)", output))
    assert sorted(losses) == ["0", "1"], output[-3000:]
    assert all(float(loss) < 0.5 for loss in losses.values())


@pytest.mark.parametrize("example", ["databricks", "databricks-multifile"])
def test_the_examples_render_the_same_from_any_folder(
    example: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = ROOT / "examples" / example / "job.yaml"
    rendered = []
    for where in (ROOT, job.parent, tmp_path):
        monkeypatch.chdir(where)
        rendered.append(backend().render(load_job(job)).to_dict())
    assert rendered[0] == rendered[1] == rendered[2]


@pytest.mark.parametrize(("volume", "operation"), [(None, "import"), ("/Volumes/main/ml/code", "fs-put")])
def test_an_upload_that_fails_is_sent_again_whole(
    platform: DatabricksPlatform, tmp_path: Path, volume: str | None, operation: str
) -> None:
    job = load_job(_project(tmp_path))
    platform.inject(operation, "error")  # the archive's upload: a 500, its outcome unknown
    backend = platform.backend()
    settings = {**platform.settings, **({"volume": volume} if volume else {})}
    backend.send(backend.render(job, settings))
    bundle = packaging.for_job(job)
    assert bundle is not None
    archive = next(path for path in platform.workspace.files if path.endswith(".tar.gz"))
    assert platform.workspace.files[archive] == bundle.archive()
    tries = [c for c in platform.workspace.received if platform.workspace.operation(c) == operation]
    assert len(tries) == (3 if operation == "import" else 2)  # (the launcher is an import too)


# -- DeepSpeed and Horovod -----------------------------------------------------------------------------------
def test_deepspeed_runs_under_deepspeed_torch_distributor_with_its_arguments_on_every_rank() -> None:
    """pyspark's DeepspeedTorchDistributor adds `--deepspeed --deepspeed_config FILE` to every rank's command,
    function mode included; crosstrain's ranks run the job's command with the same two arguments."""
    job = merge(BASE_JOB, {"launch": {"framework": "deepspeed", "deepspeed_config": "/Workspace/ds.json"}})
    request = render(job)
    task = request.create.body["tasks"][0]
    call = DistributorCall.parse(task["spark_python_task"]["parameters"])
    nodes = job_from_dict(job).nodes
    assert (call.deepspeed, call.nodes, call.deepspeed_config) == (True, nodes, "/Workspace/ds.json")
    assert call.args[-3:] == ("--deepspeed", "--deepspeed_config", "/Workspace/ds.json")
    gpus = call.num_processes // nodes
    expected = f"DeepspeedTorchDistributor(numGpus={gpus}, nnodes={nodes}, localMode=False, useGpu=True, "
    assert any(note.startswith(expected) for note in request.notes), request.notes
    plain = DistributorCall.parse(render(BASE_JOB).create.body["tasks"][0]["spark_python_task"]["parameters"])
    assert not plain.deepspeed
    assert not any("--deepspeed" in p for p in plain.parameters())


def test_deepspeed_needs_a_runtime_with_deepspeed_torch_distributor() -> None:
    job = merge(BASE_JOB, {"launch": {"framework": "deepspeed"}})
    with pytest.raises(Unsupported) as refused:
        render(job, spark_version="13.3.x-gpu-ml-scala2.12")
    [problem] = refused.value.problems
    assert problem.path == "targets.databricks.spark_version"
    assert "14.0 ML" in problem.message
    render(job, spark_version="14.3.x-gpu-ml-scala2.12")


def test_horovod_is_refused_with_the_reason() -> None:
    with pytest.raises(Unsupported) as refused:
        render(merge(BASE_JOB, {"launch": {"framework": "horovod"}}))
    [problem] = refused.value.problems
    assert problem.path == "launch.framework"
    assert "HorovodRunner" in problem.message
    assert "16.0" in problem.message
    assert "azureml" in problem.fix
