"""The databricks backend: render against the SDK's own request classes and golden files; submit, wait,
cancel and logs with the real `WorkspaceClient` talking to a loopback workspace (databricks_workspace.py).

Regenerate the golden files with `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_databricks.py`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends import create_backend
from crosstrain.backends.base import Backend, JobState, Request
from crosstrain.databricks_task import DistributorCall
from crosstrain.errors import JobFailed, SpecError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, merge
from tests.backends.databricks_workspace import Workspace, serve

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


def backend(**kwargs: Any) -> Backend:
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
            {"host": "https://1234567890123456.7.gcp.databricks.com", "crosstrain_library": "image"},
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
            {
                **AWS,
                "crosstrain_library": "/Volumes/main/default/wheels/crosstrain-0.1.0-py3-none-any.whl",
                "libraries": ["transformers==4.46.0"],
            },
        ),
    }


def _example(monkeypatch: pytest.MonkeyPatch) -> Request:
    monkeypatch.chdir(EXAMPLE_DIR)
    return backend().render(load_job("job.yaml"))


def _all_rendered(monkeypatch: pytest.MonkeyPatch) -> dict[str, Request]:
    rendered = {name: backend().render(job_from_dict(job), s) for name, (job, s) in _golden_cases().items()}
    return {"example-aws": _example(monkeypatch), **rendered}


def test_golden_files(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, request in _all_rendered(monkeypatch).items():
        text = json.dumps(request.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        path = GOLDEN / f"{name}.json"
        if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} differs; regenerate with CROSSTRAIN_UPDATE_GOLDEN=1"


def test_bodies_round_trip_through_the_sdk_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.sdk.service import jobs, workspace

    for name, request in _all_rendered(monkeypatch).items():
        body = request.create.body
        for task in body["tasks"]:
            assert jobs.SubmitTask.from_dict(task).as_dict() == task, name
        if "run_as" in body:
            assert jobs.JobRunAs.from_dict(body["run_as"]).as_dict() == body["run_as"], name
        for call in request.calls[:-1]:
            if call.url.endswith("/workspace/import"):
                workspace.ImportFormat(call.body["format"])


def test_a_two_gpu_job_is_the_seed_example() -> None:
    """Databricks' guide: `TorchDistributor(num_processes=2, local_mode=False, use_gpu=True).run(train_file, *args)`."""
    train_file, args = "/Workspace/Users/me@example.com/train.py", ["--learning_rate=0.001", "--batch_size=16"]
    job = {"name": "seed", "command": ["python", train_file, *args], "primary": {"machine": "T4:1"}}
    task = render({**job, "workers": {"replicas": 1}}).create.body["tasks"][0]
    call = DistributorCall.parse(task["python_wheel_task"]["parameters"])
    assert (call.num_processes, call.local_mode, call.use_gpu) == (2, False, True)
    assert (call.kind, call.target, list(call.args)) == ("file", train_file, args)
    cluster = task["new_cluster"]
    assert cluster["num_workers"] == 2
    assert cluster["spark_conf"] == {"spark.task.resource.gpu.amount": "1"}
    assert cluster["node_type_id"] == "g4dn.xlarge"


def test_cluster_shape_follows_the_job() -> None:
    multi = render(merge(BASE_JOB, {"primary": {"machine": "A100:8"}, "image": None})).create.body["tasks"][0]
    call = DistributorCall.parse(multi["python_wheel_task"]["parameters"])
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
    call = DistributorCall.parse(single_task["python_wheel_task"]["parameters"])
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
    mkdirs, upload, submit = first.calls
    assert mkdirs.body == {"path": f"/Workspace/Shared/crosstrain/{first.identity}"}
    assert upload.body["path"] == f"/Workspace/Shared/crosstrain/{first.identity}/train.py"
    assert upload.body["content"] == "cHJpbnQoJ3YxJykK"  # base64 of the file
    params = submit.body["tasks"][0]["python_wheel_task"]["parameters"]
    assert DistributorCall.parse(params).target == upload.body["path"]

    (tmp_path / "train.py").write_text("print('v2')\n")
    assert render(job).identity != first.identity
    with pytest.raises(Unsupported, match="neither a file here nor a path on the cluster"):
        render({**job, "command": "python missing.py"})


# -- submit, wait, cancel, logs through the real WorkspaceClient ---------------------------------------------
@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient Databricks credentials or profiles: the test's client is the only one."""
    for name in list(os.environ):
        if name.startswith("DATABRICKS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))


def client(ws: Workspace, *, http_timeout: int = 5) -> Any:
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.core import Config

    config = Config(host=ws.url, token="x", retry_timeout_seconds=30, http_timeout_seconds=http_timeout)
    return WorkspaceClient(config=config)


@pytest.fixture
def workspace(clean_env: None) -> Iterator[Workspace]:
    with serve(Workspace()) as ws:
        yield ws


def test_submit_sends_exactly_the_rendered_calls(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = _example(monkeypatch)
    handle = backend(transport=client(workspace)).send(request)
    sent = [(method, path, body) for method, path, body in workspace.received if method == "POST"]
    assert sent == [("POST", call.url.removeprefix(AWS["host"]), call.body) for call in request.calls]
    assert workspace.submits()[0]["idempotency_token"] == request.identity
    assert handle.job_id == "1000"
    assert handle.console_url.endswith("#job/runs/1000")
    assert handle.ref["host"] == AWS["host"]


@pytest.mark.parametrize("fault", ["slow", "503", "429", "drop"])
def test_a_retried_submit_makes_exactly_one_run(clean_env: None, fault: str) -> None:
    with serve(Workspace([fault], slow_seconds=2.0)) as ws:
        request = render(BASE_JOB)
        handle = backend(transport=client(ws, http_timeout=1)).send(request)
    submits = ws.submits()
    assert len(submits) == 2, "the SDK resends the POST after this fault"
    assert submits[0] == submits[1] == request.create.body
    assert list(ws.runs) == [int(handle.job_id)]


@pytest.mark.parametrize(
    ("result", "expected"),
    [("FAILED", JobState.FAILED), ("TIMEDOUT", JobState.FAILED), ("CANCELED", JobState.CANCELLED)],
)
def test_wait_outlasts_the_sdk_default_and_fails_on_a_failed_result(
    workspace: Workspace, result: str, expected: JobState
) -> None:
    workspace.states = [("PENDING", None)] * 3 + [("RUNNING", None)] * 25 + [("TERMINATED", result)]
    slept: list[float] = []
    db = backend(transport=client(workspace), retry=RetryPolicy(sleep=slept.append))
    handle = db.send(render(BASE_JOB))
    with pytest.raises(JobFailed, match=f"{expected.value} \\(TERMINATED/{result}\\)"):
        db.wait(handle)
    assert sum(slept) > 20 * 60, "the SDK's own wait would have given up after 20 minutes"


def test_wait_returns_on_success(workspace: Workspace) -> None:
    db = backend(transport=client(workspace), retry=RetryPolicy(sleep=lambda s: None))
    handle = db.send(render(BASE_JOB))
    status = db.wait(handle)
    assert (status.state, status.native_state) == (JobState.SUCCEEDED, "TERMINATED/SUCCESS")


def test_logs_read_the_task_runs_output(workspace: Workspace) -> None:
    workspace.output = {"logs": "rank 0: loss 1.0 -> 0.1", "error": "Exception: rank 1 failed"}
    db = backend(transport=client(workspace))
    handle = db.send(render(BASE_JOB))
    assert list(db.logs(handle)) == ["rank 0: loss 1.0 -> 0.1", "error: Exception: rank 1 failed"]
    output_ids = [query["run_id"] for method, path, query in workspace.received if path.endswith("get-output")]
    assert output_ids == [str(workspace.runs[int(handle.job_id)]["task_run_id"])]


def test_cancel_cancels_the_run(workspace: Workspace) -> None:
    db = backend(transport=client(workspace))
    handle = db.send(render(BASE_JOB))
    db.cancel(handle)
    assert ("POST", "/api/2.2/jobs/runs/cancel", {"run_id": int(handle.job_id)}) in workspace.received
    assert db.status(handle).state is JobState.CANCELLED


@pytest.mark.parametrize("example", sorted(ROOT.glob("examples/**/*.yaml")), ids=lambda p: p.stem)
def test_every_example_renders_or_is_refused_with_reasons(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(example.parent)
    problems: tuple[Any, ...] = ()
    try:
        backend().render(load_job(example), {} if "databricks" in load_job(example).targets else AWS)
    except Unsupported as refused:
        problems = refused.problems
    assert all(p.path and p.fix for p in problems)
