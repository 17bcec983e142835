"""The AI Platform Training backend: rendered bodies against ml.v1's discovery document, refusals, golden files,
and submission through google-auth's AuthorizedSession to a loopback server that speaks `ml.googleapis.com/v1`.

Regenerate the golden files with `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_aiplatform.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosstrain.backends import create_backend
from crosstrain.backends.aiplatform import AIPlatformBackend, job_id
from crosstrain.backends.base import JobHandle, JobState, Request
from crosstrain.errors import JobFailed, SubmitError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, merge
from tests.backends.discovery import assert_conforms
from tests.conftest import ROOT

SETTINGS = {"project": "my-project", "region": "us-central1"}
GOLDEN = Path(__file__).parent / "golden" / "aiplatform"
JOB_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


class TestAIPlatformConformance(BackendConformance):
    target = "aiplatform"
    settings = SETTINGS
    refused = [
        ({"reduction_server": {"replicas": "auto"}}, "--target vertex"),
        ({"primary": {"machine": "H100:8"}}, "--target vertex"),
        ({"primary": {"machine": {"type": "a3-highgpu-8g"}}}, "--target vertex"),
        ({"primary": {"machine": "A100-80GB:8"}}, "ends at NVIDIA_TESLA_A100"),
        ({"scheduling": {"spot": True}}, "spot"),
        ({"scheduling": {"max_restarts": 2}}, "restart"),
        ({"scheduling": {"max_wait": "10m"}}, "1800s"),
        ({"launch": {"mode": "per-process"}}, "one process per node"),
        ({"command": None}, "needs a command"),
        ({"primary": {"boot_disk": {"type": "hyperdisk-balanced"}}}, "boot disk type"),
        ({"network": "my-vpc"}, "projects/PROJECT_NUMBER/global/networks/NAME"),
        ({"output_dir": "/tmp/out"}, "gs://"),
        ({"labels": {"Team": "ml"}}, "label key"),
    ]


def backend(**kwargs: Any) -> AIPlatformBackend:
    made = create_backend("aiplatform", environ={}, **kwargs)
    assert isinstance(made, AIPlatformBackend)
    return made


def render(changes: dict[str, Any] | None = None, **settings: Any) -> Request:
    return backend().render(job_from_dict(merge(BASE_JOB, changes or {})), {**SETTINGS, **settings})


def training_input(changes: dict[str, Any] | None = None, **settings: Any) -> dict[str, Any]:
    body: dict[str, Any] = render(changes, **settings).create.body
    return body["trainingInput"]  # type: ignore[no-any-return]


# -- render -----------------------------------------------------------------------------------------------------
TOPOLOGIES: dict[str, dict[str, Any]] = {
    "base": {},
    "one-node": {"workers": {"replicas": 0}, "primary": {"machine": "T4:1"}},
    "cpu-only": {"primary": {"machine": {"type": "n1-highcpu-16"}}, "env": None},
    "no-machine": {"primary": {"machine": None}},
    "a100-8": {"primary": {"machine": "A100:8"}, "workers": {"replicas": 3}},
    "per-pool": {"workers": {"replicas": 2, "machine": "V100:8", "image": "registry.example/w:2", "args": ["-w"]}},
    "aux-pools": {"parameter_servers": {"replicas": 2}, "evaluators": {"replicas": 1, "machine": "T4:1"}},
    "everything": {
        "identity": "sa@p.iam.gserviceaccount.com",
        "network": "projects/123/global/networks/vpc",
        "output_dir": "gs://b/out",
        "scheduling": {"timeout": "1h", "max_wait": "30m"},
        "primary": {"boot_disk": {"type": "pd-standard", "size_gb": 300}},
    },
}


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_every_body_conforms_to_the_ml_v1_discovery_document(name: str) -> None:
    assert_conforms("ml.v1", "GoogleCloudMlV1__Job", render(TOPOLOGIES[name]).create.body)


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_google_api_client_builds_the_same_create_call(name: str) -> None:
    """The discovery-built client, given our body, sends exactly our method, URL and body (nothing is sent)."""
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient.discovery import build

    request = render(TOPOLOGIES[name])
    ml = build("ml", "v1", credentials=AnonymousCredentials(), static_discovery=True, cache_discovery=False)
    built = ml.projects().jobs().create(parent="projects/my-project", body=request.create.body)
    assert (built.method, built.uri.split("?")[0]) == ("POST", request.create.url)
    assert json.loads(built.body) == request.create.body


def test_body_shape_of_a_multi_node_gpu_job() -> None:
    request = render()
    body = request.create.body
    assert body["jobId"] == job_id(request.identity)
    assert body["labels"] == {"crosstrain-id": request.identity, "team": "ml"}
    ti = body["trainingInput"]
    assert (ti["scaleTier"], ti["region"], ti["masterType"], ti["workerType"]) == (
        "CUSTOM",
        "us-central1",
        "n1-standard-32",
        "n1-standard-32",
    )
    assert ti["workerCount"] == "2"
    assert ti["masterConfig"]["acceleratorConfig"] == {"count": "4", "type": "NVIDIA_TESLA_V100"}
    assert ti["scheduling"] == {"maxRunningTime": "7200s"}
    assert ti["masterConfig"]["containerArgs"] == ["--epochs", "2"]
    assert "args" not in ti  # TrainingInput.args cannot be combined with containerCommand


def test_worker_image_is_explicit_even_when_it_equals_the_masters() -> None:
    ti = training_input()
    assert ti["workerConfig"]["imageUri"] == ti["masterConfig"]["imageUri"] == BASE_JOB["image"]
    assert training_input(TOPOLOGIES["per-pool"])["workerConfig"]["imageUri"] == "registry.example/w:2"


def test_more_than_one_gpu_per_node_runs_under_the_per_node_launcher() -> None:
    ti = training_input({"env": None})
    expected = ["python", "-m", "crosstrain.launch", "--nproc-per-node", "4", "--", "python", "-m", "train"]
    assert ti["masterConfig"]["containerCommand"] == expected
    assert ti["workerConfig"]["containerCommand"] == expected
    per_node = training_input({"env": None, "launch": {"mode": "per-node", "processes_per_node": 2}})
    assert per_node["masterConfig"]["containerCommand"][3:5] == ["--nproc-per-node", "2"]


def test_one_process_per_node_runs_the_command_as_is() -> None:
    single = training_input({"env": None, "primary": {"machine": "T4:1"}})
    assert single["masterConfig"]["containerCommand"] == ["python", "-m", "train"]
    one = training_input({"env": None, "launch": {"mode": "per-process", "processes_per_node": 1}})
    assert one["masterConfig"]["containerCommand"] == ["python", "-m", "train"]


def test_auxiliary_pools_are_never_wrapped_in_the_launcher() -> None:
    ti = training_input({"env": None, **TOPOLOGIES["aux-pools"]})
    assert ti["parameterServerCount"] == "2"
    assert ti["evaluatorCount"] == "1"
    assert ti["parameterServerConfig"]["containerCommand"] == ["python", "-m", "train"]
    assert ti["evaluatorConfig"]["acceleratorConfig"] == {"count": "1", "type": "NVIDIA_TESLA_T4"}


def test_env_is_passed_through_the_env_utility() -> None:
    command = training_input({"workers": {"env": {"EXTRA": "1"}}})["workerConfig"]["containerCommand"]
    assert command[:3] == ["env", "EXTRA=1", "NCCL_DEBUG=INFO"]
    assert command[3:6] == ["python", "-m", "crosstrain.launch"]


def test_cpu_only_and_machineless_pools() -> None:
    cpu = training_input(TOPOLOGIES["cpu-only"])
    assert cpu["masterType"] == "n1-highcpu-16"
    assert "acceleratorConfig" not in cpu["masterConfig"]
    assert training_input(TOPOLOGIES["no-machine"])["masterType"] == "n1-standard-4"


def test_optional_fields_and_settings_overrides() -> None:
    ti = training_input(TOPOLOGIES["everything"], priority=500)
    assert ti["serviceAccount"] == "sa@p.iam.gserviceaccount.com"
    assert ti["network"] == "projects/123/global/networks/vpc"
    assert ti["jobDir"] == "gs://b/out"
    assert ti["scheduling"] == {"maxRunningTime": "3600s", "maxWaitTime": "1800s", "priority": 500}
    assert ti["masterConfig"]["diskConfig"] == {"bootDiskType": "pd-standard", "bootDiskSizeGb": 300}
    overridden = training_input(TOPOLOGIES["everything"], service_account="ci@p.iam.gserviceaccount.com")
    assert overridden["serviceAccount"] == "ci@p.iam.gserviceaccount.com"


@pytest.mark.parametrize(
    "identity",
    ["ddp-quickstart-843164281b", "a-" + "x" * 200, "9lives-0123456789", "x"],
)
def test_job_id_fits_the_api_pattern_and_is_deterministic(identity: str) -> None:
    made = job_id(identity)
    assert JOB_ID.fullmatch(made), made
    assert made == job_id(identity)


def test_refusals_name_the_field_and_point_to_vertex() -> None:
    with pytest.raises(Unsupported) as refused:
        render({"primary": {"machine": "H200:8"}, "reduction_server": {}})
    paths = {p.path: p for p in refused.value.problems}
    assert set(paths) == {"primary.machine.accelerator.type", "reduction_server"}
    assert all("--target vertex" in p.fix for p in paths.values())
    assert "NVIDIA_TESLA_A100" in paths["primary.machine.accelerator.type"].message


def test_an_inherited_field_is_refused_once_at_its_source() -> None:
    with pytest.raises(Unsupported) as refused:
        render({"primary": {"machine": "V100:2", "boot_disk": {"type": "hyperdisk-balanced"}}, "command": None})
    assert sorted(p.path for p in refused.value.problems) == ["command", "env", "primary.boot_disk.type"]


def test_the_multi_node_a100_example_is_refused_for_its_reduction_server() -> None:
    with pytest.raises(Unsupported) as refused:
        backend().render(load_job(ROOT / "examples" / "multi-node-a100.yaml"), SETTINGS)
    assert {p.path for p in refused.value.problems} == {"reduction_server", "scheduling.max_restarts"}


def test_render_says_the_service_was_shut_down() -> None:
    assert any("2025-01-31" in note and "--target vertex" in note for note in render().notes)


def test_gcloud_format_carries_the_whole_body_in_its_config_file() -> None:
    request = render(TOPOLOGIES["everything"])
    text = backend().format(request, "gcloud")
    body = request.create.body
    config = yaml.safe_load(re.search(r"<<'EOF'\n(.*?)\nEOF\n", text, re.S).group(1))  # type: ignore[union-attr]
    assert config == {"labels": body["labels"], "trainingInput": body["trainingInput"]}
    last = text.strip().splitlines()[-1]
    assert last.startswith(f"gcloud ai-platform jobs submit training {body['jobId']} ")
    assert "--region=us-central1" in last
    assert f"--config={body['jobId']}.yaml" in last


def test_importing_the_backend_imports_no_google_module() -> None:
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"  # a namespace .pth of the Google SDKs may load `google` at startup
        "import crosstrain.backends.aiplatform\n"
        "bad = [m for m in set(sys.modules) - before if m.split('.')[0] in ('google', 'googleapiclient', 'requests')]\n"
        "assert not bad, bad"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- golden files -----------------------------------------------------------------------------------------------
GOLDEN_JOBS = {
    "aiplatform-legacy": (ROOT / "examples" / "aiplatform-legacy.yaml", {}),
    "ddp-quickstart": (ROOT / "examples" / "ddp-quickstart" / "job.yaml", SETTINGS),
    "base-job": (None, SETTINGS),
}


@pytest.mark.parametrize("name", GOLDEN_JOBS)
def test_golden_requests(name: str) -> None:
    path, settings = GOLDEN_JOBS[name]
    job = load_job(path) if path else job_from_dict(BASE_JOB)
    request = backend().render(job, settings)
    assert_conforms("ml.v1", "GoogleCloudMlV1__Job", request.create.body)
    text = json.dumps(request.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    golden = GOLDEN / f"{name}.json"
    if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"regenerate with CROSSTRAIN_UPDATE_GOLDEN=1 if the change is intended: {golden}"


# -- submission against a loopback ml.googleapis.com -------------------------------------------------------------
class LoopbackML:
    """A thread serving the `ml.googleapis.com/v1` job paths: create (409 on a taken jobId), get, cancel.

    `faults` is consumed one per request: "503" (refused before accepting), "drop" (accepted, then the
    connection closes without an answer), "429" (rate limited, Retry-After: 7), "500" (server error), "400" (invalid).
    Each GET moves a job one step along `states`.
    """

    def __init__(self, faults: list[str] | None = None, states: tuple[str, ...] = ("QUEUED", "RUNNING", "SUCCEEDED")):
        self.faults = list(faults or [])
        self.states = states
        self.jobs: dict[str, dict[str, Any]] = {}
        self.steps: dict[str, int] = {}
        self.log: list[tuple[str, str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> LoopbackML:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, body: Any) -> tuple[int, dict[str, Any], dict[str, str]] | None:
        with self.lock:
            self.log.append((method, path, body))
            fault = self.faults.pop(0) if self.faults else None
            if fault == "503":
                return 503, _error(503, "UNAVAILABLE", "try again"), {}
            if fault == "429":
                return 429, _error(429, "RESOURCE_EXHAUSTED", "slow down"), {"Retry-After": "7"}
            if fault == "500":
                return 500, _error(500, "INTERNAL", "oops"), {}
            if fault == "400":
                return 400, _error(400, "INVALID_ARGUMENT", "masterType is not supported"), {}
            create = re.fullmatch(r"/v1/projects/([^/]+)/jobs", path)
            if method == "POST" and create:
                job_name = f"projects/{create.group(1)}/jobs/{body['jobId']}"
                if job_name in self.jobs:
                    return 409, _error(409, "ALREADY_EXISTS", "A job with this id already exists."), {}
                self.jobs[job_name] = {**body, "state": "QUEUED", "createTime": "2025-01-01T00:00:00Z"}
                self.steps[job_name] = 0
                return None if fault == "drop" else (200, self.jobs[job_name], {})
            match = re.fullmatch(r"/v1/(projects/[^/]+/jobs/[^/:]+)(:cancel)?", path)
            if not match or match.group(1) not in self.jobs:
                return 404, _error(404, "NOT_FOUND", f"no {path}"), {}
            job = self.jobs[match.group(1)]
            if method == "POST" and match.group(2):
                if job["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    return 400, _error(400, "FAILED_PRECONDITION", "the job has ended"), {}
                job["state"] = "CANCELLED"
                return 200, {}, {}
            if method == "GET" and job["state"] != "CANCELLED":
                step = min(self.steps[match.group(1)], len(self.states) - 1)
                job["state"] = self.states[step]
                self.steps[match.group(1)] += 1
                if job["state"] == "FAILED":
                    job["errorMessage"] = "The replica master 0 exited with a non-zero status of 1."
            return 200, job, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                answer = cloud.answer(self.command, self.path.split("?")[0], body)
                if answer is None:  # accepted, then the connection drops before the answer
                    self.close_connection = True
                    return
                code, payload, headers = answer
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _error(code: int, status: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


@pytest.fixture
def sleeps() -> list[float]:
    return []


def session() -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.auth.transport.requests import AuthorizedSession

    authorized = AuthorizedSession(AnonymousCredentials())
    authorized.trust_env = False  # no proxy between the test and its loopback server
    return authorized


def loopback_backend(sleeps: list[float]) -> AIPlatformBackend:
    return backend(transport=session(), retry=RetryPolicy(sleep=sleeps.append))


def submit(cloud: LoopbackML, sleeps: list[float], changes: dict[str, Any] | None = None) -> tuple[Any, JobHandle]:
    made = loopback_backend(sleeps)
    job = job_from_dict(merge(BASE_JOB, changes or {}))
    request = made.render(job, {**SETTINGS, "endpoint": cloud.endpoint})
    return request, made.send(request)


@pytest.fixture
def cloud() -> Iterator[LoopbackML]:
    with LoopbackML() as running:
        yield running


def test_submit_sends_the_rendered_body_and_follows_the_job(cloud: LoopbackML, sleeps: list[float]) -> None:
    request, handle = submit(cloud, sleeps)
    assert [(m, p) for m, p, _ in cloud.log] == [("POST", "/v1/projects/my-project/jobs")]
    assert cloud.log[0][2] == request.create.body
    assert (handle.job_id, handle.adopted) == (request.create.body["jobId"], False)
    assert "ai-platform/jobs/" in handle.console_url
    status = loopback_backend(sleeps).wait(handle, poll_interval=1)
    assert (status.state, status.native_state) == (JobState.SUCCEEDED, "SUCCEEDED")
    assert len(cloud.jobs) == 1


@pytest.mark.parametrize(
    ("faults", "adopted", "posts"),
    [
        (["503"], False, 2),  # refused before accepting: sent again
        (["drop"], True, 2),  # accepted, answer lost: the retry meets 409 and adopts the job
        (["429"], False, 2),  # rate limited: sent again after Retry-After
        (["500", "drop", "503"], True, 4),  # unknown, lost, refused, then 409
    ],
)
def test_faulty_creates_end_with_exactly_one_job(
    faults: list[str], adopted: bool, posts: int, sleeps: list[float]
) -> None:
    with LoopbackML(faults) as cloud:
        request, handle = submit(cloud, sleeps)
        assert len(cloud.jobs) == 1
        assert handle.adopted is adopted
        assert sum(1 for method, _, _ in cloud.log if method == "POST") == posts
        assert all(body == request.create.body for method, _, body in cloud.log if method == "POST")
        if "429" in faults:
            assert sleeps
            assert sleeps[0] >= 7
        assert loopback_backend(sleeps).wait(handle, poll_interval=1).state is JobState.SUCCEEDED


def test_a_500_on_a_poll_is_retried_and_the_failure_is_reported(sleeps: list[float]) -> None:
    with LoopbackML(states=("QUEUED", "PREPARING", "RUNNING", "FAILED")) as cloud:
        _, handle = submit(cloud, sleeps)
        cloud.faults = ["500"]
        with pytest.raises(JobFailed, match="non-zero status"):
            loopback_backend(sleeps).wait(handle, poll_interval=1)
        gets = [p for m, p, _ in cloud.log if m == "GET"]
        assert len(gets) == 5  # the 500 and four states
        assert len(cloud.jobs) == 1


def test_resubmitting_the_same_spec_adopts_the_first_job(cloud: LoopbackML, sleeps: list[float]) -> None:
    _, first = submit(cloud, sleeps)
    _, second = submit(cloud, sleeps)
    assert (first.adopted, second.adopted) == (False, True)
    assert first == second
    assert len(cloud.jobs) == 1


def test_a_taken_job_id_without_our_identity_is_not_adopted(cloud: LoopbackML, sleeps: list[float]) -> None:
    request, _ = submit(cloud, sleeps)
    (stored,) = cloud.jobs.values()
    stored["labels"] = {"crosstrain-id": "someone-else"}
    with pytest.raises(SubmitError, match="--run-id new"):
        loopback_backend(sleeps).send(request)


def test_a_rejected_create_is_not_retried(sleeps: list[float]) -> None:
    with LoopbackML(["400"]) as cloud:
        with pytest.raises(SubmitError, match="400 INVALID_ARGUMENT: masterType is not supported"):
            submit(cloud, sleeps)
        assert len(cloud.log) == 1
        assert not cloud.jobs


def test_cancel_and_cancel_after_the_end(cloud: LoopbackML, sleeps: list[float]) -> None:
    _, handle = submit(cloud, sleeps)
    made = loopback_backend(sleeps)
    made.cancel(handle)
    assert made.status(handle).state is JobState.CANCELLED
    made.cancel(handle)  # already over: nothing to do, no error
    assert made.status(handle).native_state == "CANCELLED"


def test_the_handle_string_reconnects_in_a_new_backend(cloud: LoopbackML, sleeps: list[float]) -> None:
    _, handle = submit(cloud, sleeps)
    again = JobHandle.loads(str(handle))
    assert again == handle
    assert loopback_backend(sleeps).status(again).state is JobState.QUEUED


def test_logs_point_to_cloud_logging(cloud: LoopbackML, sleeps: list[float]) -> None:
    _, handle = submit(cloud, sleeps)
    lines = list(loopback_backend(sleeps).logs(handle))
    assert any(f'resource.labels.job_id="{handle.job_id}"' in line for line in lines)
    assert any(line.startswith("gcloud logging read") and "--project=my-project" in line for line in lines)
