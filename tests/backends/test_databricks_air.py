"""The databricks-air backend (Databricks AI Runtime): render against databricks-sdk's own request classes and
golden files, the deployment's shape, the command script, and every refusal with its field and fix.

Regenerate the golden files with `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_databricks_air.py`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from crosstrain.backends._databricks import runtime_bundle
from crosstrain.backends.base import Backend
from crosstrain.backends.databricks_air import backend as air_backend
from crosstrain.backends.databricks_air import plan as air_plan
from crosstrain.backends.loopback import LoopbackPlatform
from crosstrain.errors import IdentityConflict, SpecError, SubmitError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.testing.conformance import BackendConformance, SendConformance, merge
from tests.backends.databricks_workspace import DatabricksAIRPlatform
from tests.backends.validators import violations

GOLDEN = Path(__file__).parent / "golden" / "databricks-air"
HOST = {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}
H100_JOB: dict[str, Any] = {
    "name": "air-job",
    "command": "python train.py --epochs 2",
    "primary": {"machine": "H100:8"},
}


class TestDatabricksAIRConformance(BackendConformance):
    target = "databricks-air"
    settings = HOST
    job_changes: ClassVar[dict[str, Any]] = {"primary": {"machine": "H100:8"}}
    refused = [
        ({"reduction_server": {"replicas": 2}}, "reduction server"),
        ({"parameter_servers": {"replicas": 1}}, "parameter servers"),
        ({"workers": {"machine": "H100:1"}}, "runs one machine on every node"),
        ({"workers": {"image": "registry.example/other:2"}}, "runs one image on every node"),
        ({"network": "projects/p/global/networks/n"}, "network"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "CUDA_VISIBLE_DEVICES"),
        ({"primary": {"machine": "A100:8"}}, "does not offer A100"),
        ({"primary": {"machine": "H100:4"}}, "no machine with 4 x H100"),
        ({"primary": {"machine": {"type": "GPU_4xH100"}}}, "offers no accelerator type GPU_4xH100"),
        ({"launch": {"processes_per_node": 2}}, "one process per GPU"),
        ({"launch": {"mode": "per-node"}}, "cannot launch per-node"),
        ({"environment": "pytorch:2.5", "image": None}, "serverless GPU environment"),
        ({"scheduling": {"spot": True}}, "spot"),
    ]
    # How submit authenticates says nothing about the job.
    unsent_settings: ClassVar[dict[str, Any]] = {"profile": "other"}


def backend(**kwargs: Any) -> Backend[Any, Any]:
    return create_backend("databricks-air", environ={}, **kwargs)


def render(job: dict[str, Any], **settings: Any) -> Request:
    return backend().render(job_from_dict(job), {**HOST, **settings})


def _script(request: Request) -> str:
    """The command script the request uploads (the import of its command_path)."""
    path = request.create.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
    call = next(c for c in request.calls if c.url.endswith("/workspace/import") and c.body["path"] == path)
    return base64.b64decode(call.body["content"]).decode()


def _exec(script: str) -> list[str]:
    """The script's last statement, `exec ...`, as argv (the bootstrap program inside spans lines)."""
    return shlex.split(script[script.index("\nexec ") + 1 :])


# -- render ------------------------------------------------------------------------------------------------
def _golden_cases(tmp: Path) -> dict[str, Request]:
    code = tmp / "project"
    (code / "src").mkdir(parents=True)
    (code / "src" / "train.py").write_text("print('training')\n")
    (code / "requirements.txt").write_text("torch==2.5.1\ntransformers==4.46.0\n")
    (code / "job.yaml").write_text(
        "name: two-nodes\ncode: src\nrequirements: requirements.txt\ncommand: python train.py --epochs 2\n"
        "primary: {machine: 'H100:8'}\nworkers: {replicas: 1}\nenv: {NCCL_DEBUG: INFO}\nscheduling: {timeout: 2h}\n"
    )
    return {
        "two-nodes-code": backend().render(load_job(code / "job.yaml"), HOST),
        "one-a10-image-reserved": render(
            {
                "name": "reserved",
                "image": "registry.example/train:1.0",
                "command": ["python", "-m", "trainer.main"],
                "primary": {"machine": "A10G:1"},
                "scheduling": {"max_restarts": 2},
                "identity": "trainer@example.com",
            },
            provisioned_capacity_id="pc-123",
            priority_class="BEST_EFFORT",
            experiment="team-runs",
            experiment_directory="/Workspace/Shared/experiments",
        ),
        "volume": render({**H100_JOB, "workers": {"replicas": 3}}, volume="/Volumes/main/ml/code"),
    }


def _stable(request: Request) -> str:
    """The request as JSON with what changes with every edit of crosstrain's runtime (the bundle digest and sizes,
    the script that names them) replaced by placeholders, so the golden files review the shape."""
    runtime = runtime_bundle()
    data = request.to_dict()
    for call in data["calls"]:
        content = (call.get("body") or {}).get("content")
        if isinstance(content, dict):
            for key in ("sha256 of the bundle", "bytes", "user bytes"):
                if key in content:
                    content[key] = f"<{key}>"
        elif isinstance(content, str):
            call["body"]["content"] = "<the command script, base64>"
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if request.code is not None:  # a code bundle's digest names crosstrain's runtime too, and so does the identity
        text = (
            text.replace(request.code.digest, "<code digest>")
            .replace(request.code.digest[:32], "<code bundle>")
            .replace(request.fingerprint, "<fingerprint>")
        )
        text = text.replace(request.identity, "<identity>")
    return text.replace(runtime.short, "<runtime bundle>")


def test_golden_files(tmp_path: Path) -> None:
    for name, request in _golden_cases(tmp_path).items():
        text = _stable(request)
        text = text.replace(str(tmp_path), "<tmp>")
        path = GOLDEN / f"{name}.json"
        if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.read_text() == text, f"{path.name} differs; regenerate with CROSSTRAIN_UPDATE_GOLDEN=1"


def test_bodies_round_trip_through_the_sdk_classes(tmp_path: Path) -> None:
    from databricks.sdk.service import jobs

    for name, request in _golden_cases(tmp_path).items():
        assert not violations(request), name
        task = request.create.body["tasks"][0]
        assert jobs.SubmitTask.from_dict(task).as_dict() == task, name
        for environment in request.create.body.get("environments", []):
            assert jobs.JobEnvironment.from_dict(environment).as_dict() == environment


@pytest.mark.parametrize(
    ("machine", "nodes", "accelerator", "count"),
    [
        ("H100:8", 2, "GPU_8xH100", 16),
        ("H100:1", 1, "GPU_1xH100", 1),
        ("A10G:1", 4, "GPU_1xA10", 4),
        ("B300:8", 1, "GPU_8xB300", 8),
        ({"type": "GPU_8xH100"}, 3, "GPU_8xH100", 24),
    ],
)
def test_the_pool_is_one_deployment_with_the_total_count(
    machine: Any, nodes: int, accelerator: str, count: int
) -> None:
    request = render({**H100_JOB, "primary": {"machine": machine}, "workers": {"replicas": nodes - 1}})
    (deployment,) = request.create.body["tasks"][0]["ai_runtime_task"]["deployments"]
    assert deployment["compute"] == {"accelerator_type": accelerator, "accelerator_count": count}


def test_the_identity_is_the_token_and_the_mlflow_run_and_the_script_names_the_fingerprint() -> None:
    request = render(H100_JOB)
    body = request.create.body
    spec = body["tasks"][0]["ai_runtime_task"]
    assert body["idempotency_token"] == spec["mlflow_run"] == request.identity
    path = spec["deployments"][0]["command_path"]
    assert path == f"/Workspace/Shared/crosstrain/air/{request.identity}/{request.fingerprint}/command.sh"
    assert spec["experiment"] == "air-job"
    assert body["timeout_seconds"] == 0
    assert body["tasks"][0]["max_retries"] == 0


def test_the_command_script_exports_the_env_and_starts_the_launcher_in_the_code_folder(tmp_path: Path) -> None:
    request = _golden_cases(tmp_path)["two-nodes-code"]
    script = _script(request)
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    assert "set -euo pipefail" in lines
    assert "export NCCL_DEBUG=INFO" in lines
    argv = _exec(script)
    assert argv[:3] == ["exec", "python3", "-c"]
    archive = argv[4]
    assert archive.startswith("/Workspace/Shared/crosstrain/code/")
    assert archive.endswith(".tar.gz")
    assert argv[5:] == [
        "--",
        "python",
        "-m",
        "crosstrain.launch",
        "--nproc-per-node",
        "8",
        "--",
        "python",
        "train.py",
        "--epochs",
        "2",
    ]
    uploaded = [c.body["path"] for c in request.calls if c.url.endswith("/workspace/import")]
    assert archive in uploaded  # the script reads the archive the request uploads
    env = request.create.body["environments"][0]["spec"]
    assert env == {"environment_version": "4", "dependencies": ["torch==2.5.1", "transformers==4.46.0"]}


def test_a_databricks_ai_version_is_the_workspace_base_environment_as_the_air_cli_sends_it() -> None:
    """`environment.version: databricks_ai_v6` in a workload.yaml is `spec.base_environment` on the wire
    (databricks/cli cmd/air/runsubmit.go, `buildRunEnvironment`); a number stays an `environment_version`."""
    spec = render(H100_JOB, environment_version="databricks_ai_v6").create.body["environments"][0]["spec"]
    assert spec == {"base_environment": "workspace-base-environments/databricks_ai_v6"}
    spec = render(H100_JOB, environment_version="5").create.body["environments"][0]["spec"]
    assert spec == {"environment_version": "5"}


def test_the_bootstrap_in_the_script_unpacks_the_archive_and_runs_the_command(tmp_path: Path) -> None:
    """The script's own bootstrap, run here on the real archive, starts the command from the code folder."""
    from crosstrain import packaging

    code = tmp_path / "code"
    code.mkdir()
    (code / "show.py").write_text("import os, sys; print('ran in', os.path.basename(os.getcwd()), sys.argv[1:])\n")
    folder = {"path": str(code), "outside_job_folder": True}
    job = job_from_dict(
        {"name": "boot", "code": folder, "command": "python show.py --x 1", "primary": {"machine": "H100:1"}}
    )
    request = backend().render(job, HOST)
    bundle = packaging.for_job(job)
    assert bundle is not None
    archive = tmp_path / packaging.ARCHIVE_NAME
    archive.write_bytes(bundle.archive())
    argv = _exec(_script(request))[1:]
    argv[0], argv[3] = sys.executable, str(archive)
    launcher = argv.index("crosstrain.launch")
    argv = [*argv[: launcher - 2], *argv[argv.index("--", launcher) + 1 :]]  # the command alone, not the launcher
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    assert "ran in src ['--x', '1']" in out.stdout
    with tarfile.open(archive) as tar:
        assert any(name.endswith("crosstrain/launch.py") for name in tar.getnames())


def test_the_identity_does_not_move_with_crosstrains_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job without `code:` ships crosstrain's runtime alone: another runtime (another crosstrain version) uploads
    another archive under another path, and the job keeps its identity, so a re-submit adopts its run."""
    from crosstrain.backends import _databricks, base

    before = render(H100_JOB)
    other = dataclasses.replace(runtime_bundle(), digest="f" * 64)
    monkeypatch.setattr(_databricks, "runtime_bundle", lambda: other)
    monkeypatch.setattr(air_backend, "runtime_bundle", lambda: other)
    monkeypatch.setattr(air_plan, "runtime_bundle", lambda: other)
    monkeypatch.setattr(air_plan, "archive_of", lambda bundle: b"x" * 10)
    monkeypatch.setattr(air_backend, "archive_bootstrap", lambda: base.archive_bootstrap() + "# another\n")
    after = render(H100_JOB)
    assert after.calls[0].url != before.calls[0].url  # another archive
    assert after.identity == before.identity


def test_refusals_name_the_field_and_the_fix() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"primary": {"machine": "A100:8"}}, "primary.machine.accelerator.type", "GPU_8xH100"),
        ({"primary": {"machine": "H100:2"}}, "primary.machine.accelerator.count", "H100:8 (GPU_8xH100)"),
        ({"environment": "pytorch:2.5"}, "environment", "environment_version"),
    ]
    for changes, field, fix in cases:
        with pytest.raises(Unsupported) as caught:
            render(merge(H100_JOB, changes))
        problems = caught.value.problems
        assert any(p.path == field and fix in p.fix for p in problems), problems
    with pytest.raises(Unsupported) as caught:
        render(H100_JOB, priority_class="NORMAL")
    assert [p.path for p in caught.value.problems] == ["targets.databricks-air.priority_class"]


def test_secrets_go_beside_the_script_for_ai_runtimes_launcher_and_the_script_checks_they_were_set(
    tmp_path: Path,
) -> None:
    """As the air CLI stages them: `secret_env_vars.json` beside command.sh, names with scope and key, never a
    value; a variable the launcher did not set stops the node with the reason before the command runs."""
    job = {**H100_JOB, "env": {"HF_TOKEN": {"secret": "ml-scope/hf-token"}, "A_KEY": {"secret": "other/key-1"}}}
    request = render(job)
    script_path = request.create.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
    sidecar = next(c for c in request.calls if c.body and str(c.body.get("path", "")).endswith("/secret_env_vars.json"))
    assert sidecar.body["path"] == script_path.replace("command.sh", "secret_env_vars.json")
    assert json.loads(base64.b64decode(sidecar.body["content"])) == [
        {"name": "A_KEY", "secret_key": "key-1", "secret_scope": "other"},
        {"name": "HF_TOKEN", "secret_key": "hf-token", "secret_scope": "ml-scope"},
    ]
    assert "HF_TOKEN" not in json.dumps(request.create.body)  # the task itself carries no secrets
    assert any("secrets A_KEY, HF_TOKEN" in note for note in request.notes)
    script = _script(request)
    head = script[: script.index("\nexec ")] + "\necho ran\n"  # the checks and exports, then a stand-in command
    (tmp_path / "head.sh").write_text(head)
    env = {"PATH": os.environ["PATH"], "A_KEY": "v"}
    done = subprocess.run(["bash", str(tmp_path / "head.sh")], env=env, capture_output=True, text=True, check=False)
    assert done.returncode != 0
    assert "ran" not in done.stdout
    assert "AI Runtime did not set HF_TOKEN from the secret ml-scope/hf-token" in done.stderr
    env["HF_TOKEN"] = "t"
    done = subprocess.run(["bash", str(tmp_path / "head.sh")], env=env, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (0, "ran\n")
    with pytest.raises(Unsupported) as refused:  # another store's reference: AI Runtime resolves scopes only
        render({**H100_JOB, "env": {"T": {"secret": "projects/p/secrets/t"}}})
    assert [p.path for p in refused.value.problems] == ["env.T"]


def test_a_bad_setting_is_refused_with_its_fix() -> None:
    with pytest.raises(SpecError, match="not under /Workspace"):
        render(H100_JOB, experiment_directory="/Users/me")
    with pytest.raises(SpecError, match="not a Unity Catalog volume"):
        render(H100_JOB, volume="/tmp/code")


def test_an_image_carries_its_environment_and_the_bootstrap_installs_requirements(tmp_path: Path) -> None:
    request = _golden_cases(tmp_path)["one-a10-image-reserved"]
    body = request.create.body
    assert "environments" not in body
    assert "environment_key" not in body["tasks"][0]
    spec = body["tasks"][0]["ai_runtime_task"]
    assert spec["docker_image_url"] == "registry.example/train:1.0"
    assert spec["priority_class"] == "BEST_EFFORT"
    assert spec["deployments"][0]["compute"]["provisioned_capacity_id"] == "pc-123"
    assert body["run_as"] == {"user_name": "trainer@example.com"}
    assert body["tasks"][0]["max_retries"] == 2


# -- submit, status, cancel, list: the real WorkspaceClient against the loopback workspace ---------------------
@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ambient Databricks credentials or profiles: the test's client is the only one."""
    for name in list(os.environ):
        if name.startswith("DATABRICKS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))


class TestDatabricksAIRSends(SendConformance):
    target = "databricks-air"
    job_changes: ClassVar[dict[str, Any]] = {"primary": {"machine": "H100:8"}}
    reports_adoption = False  # runs/submit answers a known token exactly as a new one

    @pytest.fixture
    def platform(self, clean_env: None) -> Iterator[LoopbackPlatform]:
        with DatabricksAIRPlatform() as running:
            yield running


def _submitted(platform: DatabricksAIRPlatform, job: dict[str, Any]) -> tuple[Request, JobHandle]:
    backend_ = platform.backend()
    request = backend_.render(job_from_dict(job), dict(platform.settings))
    return request, backend_.send(request)


def test_submit_uploads_the_archive_and_the_script_and_runs_it(clean_env: None, tmp_path: Path) -> None:
    with DatabricksAIRPlatform() as platform:
        request, handle = _submitted(platform, {**H100_JOB, "workers": {"replicas": 1}})
        files = platform.workspace.files
        script = request.create.body["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]
        assert files[script].decode() == _script(request)
        archive = _exec(_script(request))[4]
        assert archive in files  # the archive the script unpacks is the one uploaded
        (submitted,) = platform.workspace.submits()
        assert submitted == request.create.body  # the SDK sent the rendered body as it is
        assert handle.ref["run_id"] == int(handle.job_id)
        again = platform.backend().send(request)  # a re-submit: the token returns the run, nothing is uploaded
        assert again.job_id == handle.job_id
        assert len(platform.workspace.runs) == 1


def test_status_says_what_the_run_waits_for(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        platform.workspace.air_status = "Waiting for GPU compute: 16 x GPU_8xH100"
        _, handle = _submitted(platform, H100_JOB)
        platform.set_state(handle, "PENDING")
        status = platform.backend().status(handle)
        assert status.state is JobState.QUEUED
        assert status.message == "Waiting for GPU compute: 16 x GPU_8xH100"


def test_a_failed_run_says_why(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        _, handle = _submitted(platform, H100_JOB)
        platform.set_state(handle, "TERMINATED/FAILED")
        platform.workspace.output = {"error": "exit code 1", "error_trace": "Traceback\nValueError: bad lr"}
        status = platform.backend().status(handle)
        assert status.state is JobState.FAILED
        assert "exit code 1" in status.message
        assert "ValueError: bad lr" in status.message


def test_list_finds_the_runs_crosstrain_made_and_cancel_stops_one(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        request, handle = _submitted(platform, H100_JOB)
        platform.workspace.submit({"run_name": "not ours", "tasks": [{"task_key": "x"}]})
        listed = list(platform.backend().list_jobs(dict(platform.settings)))
        assert [(s.identity, s.handle and s.handle.job_id) for s in listed] == [(request.identity, handle.job_id)]
        platform.backend().cancel(handle)
        assert platform.backend().status(handle).state is JobState.CANCELLED


def test_a_priority_class_the_installed_sdk_lacks_is_refused_before_anything_is_sent(clean_env: None) -> None:
    """The docs list CRITICAL; databricks-sdk 0.156.0 models it, 0.162.0 no longer does (its dataclasses would
    drop it without a word): submit sends it where the installed SDK carries it, and refuses it where not."""
    from databricks.sdk.service import jobs

    carried = "CRITICAL" in {member.value for member in jobs.AiRuntimeTaskPriorityClass}
    job = {**H100_JOB, "targets": {"databricks-air": {"provisioned_capacity_id": "pc-1", "priority_class": "CRITICAL"}}}
    with DatabricksAIRPlatform() as platform:
        if carried:
            _submitted(platform, job)
            (submitted,) = platform.workspace.submits()
            assert submitted["tasks"][0]["ai_runtime_task"]["priority_class"] == "CRITICAL"
        else:
            with pytest.raises(SubmitError, match=r"ai_runtime_task\.priority_class = \"CRITICAL\""):
                _submitted(platform, job)
            assert platform.workspace.submits() == []
            assert platform.workspace.files == {}  # nothing uploaded either


def test_a_re_submit_of_another_request_under_the_identity_is_refused(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        _submitted(platform, {**H100_JOB, "run_id": "r1"})
        with pytest.raises(IdentityConflict):
            _submitted(platform, {**H100_JOB, "run_id": "r1", "env": {"LR": "0.1"}})


def _returns_ranks() -> list[int]:
    return [0, 1]


def test_a_function_jobs_result_comes_back_from_its_volume(clean_env: None) -> None:
    """Rank 0 writes what the function returned under output_dir (a volume every node sees as files); the
    handle reads it back through the Files API once the run has succeeded."""
    import cloudpickle

    from crosstrain import api
    from crosstrain.errors import JobFailed

    base = {k: v for k, v in H100_JOB.items() if k != "command"}
    with DatabricksAIRPlatform() as platform:
        job = api.with_function(_returns_ranks, {**base, "output_dir": "/Volumes/main/ml/runs/fn"})
        handle = platform.backend().submit(job, dict(platform.settings))
        assert handle.result_at == "/Volumes/main/ml/runs/fn/crosstrain-result/result.pkl"
        (submitted,) = platform.workspace.submits()
        script = platform.workspace.files[submitted["tasks"][0]["ai_runtime_task"]["deployments"][0]["command_path"]]
        assert b"export CROSSTRAIN_RESULT_DIR=/Volumes/main/ml/runs/fn/crosstrain-result" in script
        platform.set_state(handle, "TERMINATED/SUCCESS")
        with pytest.raises(JobFailed, match="left no result"):
            handle.result()
        platform.workspace.files[handle.result_at] = cloudpickle.dumps([0, 1])
        assert handle.result() == [0, 1]


def test_the_function_example_returns_its_result_under_the_emulation() -> None:
    """examples/databricks-air-function: the notebook's function on two local nodes with AI Runtime's node
    environment; rank 0's result comes back to the caller."""
    import ast

    notebook = Path(__file__).parents[2] / "examples" / "databricks-air-function" / "notebook.py"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run(
        [sys.executable, str(notebook)], capture_output=True, text=True, timeout=300, check=False, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the dict notebook.py prints
    assert result["world_size"] == 2.0
    assert result["mean_loss"] < 0.1


# -- the node side: `crosstrain run --local --emulate databricks-air` ------------------------------------------
def test_a_local_run_starts_the_nodes_as_ai_runtime_would(tmp_path: Path) -> None:
    """Two nodes, each running the command script's command under the launcher, with AI Runtime's variables:
    every rank sees torchrun's variables for a job of two nodes."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(
        "import os\nprint('place', *(os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'NODE_RANK', 'NUM_NODES')),"
        " os.environ['NCCL_DEBUG'], os.path.basename(os.getcwd()))\n"
    )
    (tmp_path / "job.yaml").write_text(
        "name: air-local\ncode: src\ncommand: python train.py\nprimary: {machine: 'H100:1'}\nworkers: {replicas: 1}\n"
        "env: {NCCL_DEBUG: WARN}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS_")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", "run", "job.yaml", "--local", "--emulate", "databricks-air"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    places = sorted(line.split("place ", 1)[1] for line in (done.stdout + done.stderr).splitlines() if "place " in line)
    assert places == ["0 2 0 2 WARN src", "1 2 1 2 WARN src"]


# -- logs: every node's, from the per-node logs endpoint -------------------------------------------------------
def _record(second: int, node: int, body: str) -> dict[str, Any]:
    return {"time_unix_nano": str(second * 1_000_000_000 + node), "node_index": node, "body": body}


def test_logs_come_from_every_node_each_line_once(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        _, handle = _submitted(platform, {**H100_JOB, "workers": {"replicas": 1}})
        run_id = int(handle.job_id)
        records = [_record(100, 0, "start\n"), _record(100, 1, "start"), _record(101, 1, "epoch 1\nepoch 2")]
        assert platform.workspace.node_logs is not None
        platform.workspace.node_logs[run_id] = records
        platform.set_state(handle, "RUNNING")
        backend_ = platform.backend()
        reader = backend_.logs(handle, follow=False)
        first = list(reader)
        assert first == ["[node0] start", "[node1] start", "[node1] epoch 1", "[node1] epoch 2"]  # over two pages
        # Following: what came since is read from the last second seen, and nothing twice.
        from crosstrain.backends.databricks_air.logs import NodeLogs

        nodes = NodeLogs(platform.client(), run_id, lambda fn, what: fn())
        assert list(nodes.read()) == first
        records.append(_record(101, 0, "epoch 1"))
        records.append(_record(102, 0, "done"))
        assert list(nodes.read()) == ["[node0] epoch 1", "[node0] done"]
        assert list(nodes.read()) == []


def test_logs_say_where_to_look_where_neither_the_endpoint_nor_the_artifacts_serve_them(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        _, handle = _submitted(platform, H100_JOB)
        platform.workspace.node_logs = None
        platform.set_state(handle, "TERMINATED/SUCCESS")
        lines = list(platform.backend().logs(handle, follow=True))
        assert len(lines) == 1
        assert "does not serve AI Runtime's per-node logs" in lines[0]


def test_logs_come_from_the_mlflow_artifacts_where_the_endpoint_is_disabled(clean_env: None) -> None:
    """As the air CLI falls back: every node's chunk files under the run's MLflow artifacts, read through the
    signed URLs the workspace gives (the loopback storage refuses a read that carries the workspace's token);
    a file read again from where it ended, a line cut at the end waits for the rest."""
    with DatabricksAIRPlatform() as platform:
        _, handle = _submitted(platform, {**H100_JOB, "workers": {"replicas": 1}})
        platform.workspace.node_logs = None
        task_run = platform.workspace.runs[int(handle.job_id)]["task_run_id"]
        files = platform.workspace.artifacts.setdefault(f"mlflow-{task_run}", {})
        files["logs/attempt_0/node_0/logs-0.chunk.txt"] = b"start\nepoch 1\n"
        files["logs/attempt_0/node_1/logs-0.chunk.txt"] = b"start\nepo"
        files["logs/attempt_0/node_1/other.json"] = b"{}"
        platform.set_state(handle, "RUNNING")
        backend_ = platform.backend()
        from crosstrain.backends.databricks_air.logs import ArtifactLogs

        reader = ArtifactLogs(platform.client(), lambda: f"mlflow-{task_run}", lambda fn, what: fn(), 5.0)
        assert list(reader.read(False)) == ["[node0] start", "[node0] epoch 1", "[node1] start"]
        files["logs/attempt_0/node_1/logs-0.chunk.txt"] += b"ch 1\ndone"
        files["logs/attempt_0/node_1/logs-1.chunk.txt"] = b"second chunk\n"
        assert list(reader.read(False)) == ["[node1] epoch 1", "[node1] second chunk"]
        assert list(reader.read(True)) == ["[node1] done"]
        ranges = [c.headers.get("Range") for c in platform.workspace.received if c.path.startswith("/signed-storage/")]
        assert "bytes=9-" in ranges  # node 1's first chunk, read again from where it ended
        # Through the backend, a retried run's attempts are told apart.
        files["logs/attempt_1/node_0/logs-0.chunk.txt"] = b"again\n"
        platform.set_state(handle, "TERMINATED/SUCCESS")
        lines = list(backend_.logs(handle, follow=False))
        assert "[attempt1 node0] again" in lines
        assert "[attempt0 node1] done" in lines
        assert not any("does not serve" in line for line in lines)
