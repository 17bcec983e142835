"""The AI Platform Training backend: rendered bodies against ml.v1's discovery document, refusals, golden files,
and submission through google-auth's AuthorizedSession to a loopback `ml.googleapis.com/v1`
(tests/backends/aiplatform_server.py): the shared send-side suite, faults, conflicts, credentials.

Regenerate the golden files with `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_aiplatform.py`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from requests import PreparedRequest
from requests.adapters import HTTPAdapter

from crosstrain.adaptors.google_rest import authorized_session
from crosstrain.backends.aiplatform.backend import AIPlatformBackend
from crosstrain.backends.aiplatform.settings import STATE_MAP, job_id
from crosstrain.backends.loopback import Call, LoopbackPlatform, LoopbackService, Reply, serving
from crosstrain.errors import IdentityConflict, JobFailed, MissingDependency, SubmitError, TransientError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, SendConformance, merge
from tests.backends.aiplatform_server import NATIVE_STATES, AIPlatformPlatform, MLService, loopback_session
from tests.backends.test_vertex import golden_text
from tests.backends.validators import assert_valid
from tests.conftest import ROOT

SETTINGS = {"project": "my-project", "region": "us-central1"}
GOLDEN = Path(__file__).parent / "golden" / "aiplatform"
JOB_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")


class TestAIPlatformConformance(BackendConformance):
    target = "aiplatform"
    settings = SETTINGS
    unsent_settings = {"endpoint": "https://ml.mtls.googleapis.com"}  # where it is sent, not what
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
        ({"image": None}, "needs a container image"),
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
        "output_dir": "gs://bkt/out",
        "scheduling": {"timeout": "1h", "max_wait": "30m"},
        "primary": {"boot_disk": {"type": "pd-standard", "size_gb": 300}},
    },
}


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_every_body_conforms_to_the_ml_v1_discovery_document(name: str) -> None:
    assert_valid(render(TOPOLOGIES[name]))  # the discovery document and the fields it marks required


@pytest.mark.parametrize("name", TOPOLOGIES)
def test_google_api_client_builds_the_same_create_call(name: str) -> None:
    """The discovery-built client, given our body, sends exactly our method, URL and body (nothing is sent)."""
    from google.auth.credentials import AnonymousCredentials
    from googleapiclient.discovery import build

    request = render(TOPOLOGIES[name])
    ml = build("ml", "v1", credentials=AnonymousCredentials(), static_discovery=True, cache_discovery=False)  # type: ignore[no-untyped-call]
    built = ml.projects().jobs().create(parent="projects/my-project", body=request.create.body)
    assert (built.method, built.uri.split("?")[0]) == ("POST", request.create.url)
    assert json.loads(built.body) == request.create.body


def test_body_shape_of_a_multi_node_gpu_job() -> None:
    request = render()
    body = request.create.body
    assert body["jobId"] == job_id(request.identity)
    assert body["labels"] == {"crosstrain-fp": request.fingerprint, "crosstrain-id": request.identity, "team": "ml"}
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
    assert ti["jobDir"] == "gs://bkt/out"
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


@pytest.mark.parametrize(
    "changes",
    [
        {"image": None},  # fuzzed: {"name": "A"} rendered with neither masterConfig.imageUri nor runtimeVersion
        {"image": None, "workers": {"image": "registry.example/w:2"}},
    ],
)
def test_a_job_without_a_master_image_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(Unsupported) as refused:
        render(changes)
    [problem] = refused.value.problems
    assert problem.path == "image"
    assert "set `image`, or `environment: pytorch`" in problem.fix
    assert "runtime version" in problem.message
    assert render({"image": None, "primary": {"image": "registry.example/m:1"}}).create.body["trainingInput"][
        "masterConfig"
    ]["imageUri"] == ("registry.example/m:1")


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
    "aiplatform-prebuilt-package": (ROOT / "examples" / "aiplatform-prebuilt-package" / "job.yaml", {}),
    "aiplatform-data": (ROOT / "examples" / "aiplatform-data.yaml", {}),
    "sweep": (ROOT / "examples" / "sweep" / "job.yaml", {}),
}


@pytest.mark.parametrize("name", GOLDEN_JOBS)
def test_golden_requests(name: str) -> None:
    path, settings = GOLDEN_JOBS[name]
    job = load_job(path) if path else job_from_dict(BASE_JOB)
    request = backend().render(job, settings)
    assert_valid(request)
    text = golden_text(request)  # the checkout's path and the code's digest as placeholders
    golden = GOLDEN / f"{name}.json"
    if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.read_text() == text, f"regenerate with CROSSTRAIN_UPDATE_GOLDEN=1 if the change is intended: {golden}"


# -- submission against a loopback ml.googleapis.com (tests/backends/aiplatform_server.py) ----------------------
class TestAIPlatformSends(SendConformance):
    target = "aiplatform"  # submit reads the job after a create meets 409: the suite's re-submit faults that read

    @pytest.fixture
    def platform(self) -> Iterator[LoopbackPlatform]:
        with AIPlatformPlatform() as running:
            yield running


@pytest.fixture
def platform() -> Iterator[AIPlatformPlatform]:
    with AIPlatformPlatform() as running:
        yield running


def submit(
    platform: AIPlatformPlatform, changes: dict[str, Any] | None = None, **kwargs: Any
) -> tuple[Request, JobHandle]:
    made = platform.backend()
    if kwargs:
        made = AIPlatformBackend(session=loopback_session(), environ={}, **kwargs)
    request = made.render(job_from_dict(merge(BASE_JOB, changes or {})), dict(platform.settings))
    return request, made.send(request)


def posts(platform: AIPlatformPlatform) -> list[Call]:
    return [call for call in platform.service.received if call.method == "POST" and call.path.endswith("/jobs")]


def test_submit_sends_the_rendered_body_and_follows_the_job(platform: AIPlatformPlatform) -> None:
    request, handle = submit(platform)
    assert [(c.method, c.path) for c in platform.service.received] == [("POST", "/v1/projects/my-project/jobs")]
    assert platform.service.received[0].body == request.create.body
    assert (handle.job_id, handle.adopted) == (request.create.body["jobId"], False)
    assert "ai-platform/jobs/" in handle.console_url
    status = platform.backend().wait(handle, poll_interval=0.01)
    assert (status.state, status.native_state) == (JobState.SUCCEEDED, "SUCCEEDED")
    assert platform.live_jobs(request.identity) == [handle.job_id]


@pytest.mark.parametrize(
    ("faults", "adopted", "sent"),
    [
        (["refuse"], False, 2),  # refused before anything changed: sent again
        (["rate-limit"], False, 2),  # sent again after Retry-After
        (["drop"], True, 1),  # created, answer lost: the look finds the job by its jobId and adopts it
        (["slow"], True, 1),  # created, the answer comes after the client's timeout: the same
        (["late"], False, 2),  # 504, created later: the look finds nothing, the resend creates it, the late
        # effect meets the same jobId and is refused with 409
        (["refuse", "error", "drop"], True, 3),  # refused, unknown (nothing made), created with no answer
    ],
)
def test_faulty_creates_end_with_exactly_one_job(
    platform: AIPlatformPlatform, faults: list[str], adopted: bool, sent: int
) -> None:
    platform.service.inject("create", *faults)
    request, handle = submit(platform)
    platform.settle()
    assert platform.live_jobs(request.identity) == [handle.job_id]
    assert len(platform.service.jobs) == 1
    assert handle.adopted is adopted
    assert len(posts(platform)) == sent
    assert all(call.body == request.create.body for call in posts(platform))
    assert platform.backend().wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED


def test_a_rate_limited_create_waits_for_retry_after(platform: AIPlatformPlatform) -> None:
    sleeps: list[float] = []
    platform.service.inject("create", "rate-limit")
    submit(platform, retry=RetryPolicy(sleep=sleeps.append))
    assert sleeps
    assert sleeps[0] >= 1


def test_the_read_after_a_409_is_retried(platform: AIPlatformPlatform) -> None:
    request, first = submit(platform)
    platform.service.inject("get", "error", "refuse")
    _, again = submit(platform)
    assert (again.job_id, again.adopted) == (first.job_id, True)
    gets = [call for call in platform.service.received if call.method == "GET"]
    assert len(gets) == 3  # 500, 503, then the job
    assert platform.live_jobs(request.identity) == [first.job_id]


def test_a_fault_on_the_look_after_a_lost_answer_is_retried(platform: AIPlatformPlatform) -> None:
    platform.service.inject("create", "drop")
    platform.service.inject("get", "error")
    request, handle = submit(platform)
    assert handle.adopted
    assert len(posts(platform)) == 1
    assert platform.live_jobs(request.identity) == [handle.job_id]


def test_a_500_on_a_poll_is_retried_and_the_failure_is_reported() -> None:
    with AIPlatformPlatform(MLService(plan=("QUEUED", "PREPARING", "RUNNING", "FAILED"))) as platform:
        _, handle = submit(platform)
        platform.service.inject("get", "error")
        with pytest.raises(JobFailed, match="non-zero status"):
            platform.backend().wait(handle, poll_interval=0.01)
        assert len([call for call in platform.service.received if call.method == "GET"]) == 5  # the 500, 4 states


def test_a_taken_job_id_without_our_identity_is_not_adopted(platform: AIPlatformPlatform) -> None:
    request, _ = submit(platform)
    (stored,) = platform.service.jobs.values()
    stored["labels"] = {"crosstrain-id": "someone-else"}
    with pytest.raises(SubmitError, match="--run-id new") as refused:
        platform.backend().send(request)
    assert not isinstance(refused.value, IdentityConflict)
    assert "'someone-else'" in str(refused.value)
    assert "Nothing was created" in str(refused.value)
    assert len(platform.service.jobs) == 1


def test_a_job_of_ours_without_a_fingerprint_is_a_conflict(platform: AIPlatformPlatform) -> None:
    """A job made by a crosstrain that did not record fingerprints may be another request: it is not adopted."""
    request, _ = submit(platform)
    (stored,) = platform.service.jobs.values()
    del stored["labels"]["crosstrain-fp"]
    with pytest.raises(IdentityConflict) as refused:
        platform.backend().send(request)
    assert refused.value.found is None
    assert "AI Platform keeps a jobId for good" in str(refused.value)


def test_a_rejected_create_is_not_retried(platform: AIPlatformPlatform) -> None:
    platform.service.inject("create", "invalid")
    with pytest.raises(SubmitError, match="400 INVALID_ARGUMENT: injected invalid on create") as refused:
        submit(platform)
    assert not refused.value.job_may_exist
    assert len(platform.service.received) == 1
    assert not platform.service.jobs


def test_a_rejected_create_after_a_lost_answer_says_the_job_may_exist(platform: AIPlatformPlatform) -> None:
    platform.service.inject("create", "error", "invalid")
    with pytest.raises(SubmitError, match="may exist") as refused:
        submit(platform)
    assert refused.value.job_may_exist
    assert "400 INVALID_ARGUMENT" in str(refused.value)
    gets = [call for call in platform.service.received if call.method == "GET"]
    assert len(gets) == 2  # looked before resending, and once more before giving up


def test_cancel_and_cancel_after_the_end(platform: AIPlatformPlatform) -> None:
    _, handle = submit(platform)
    made = platform.backend()
    made.cancel(handle)
    assert made.status(handle).state is JobState.CANCELLED
    made.cancel(handle)  # already over: nothing to do, no error
    assert made.status(handle).native_state == "CANCELLED"


def test_a_cancel_refused_for_a_running_job_is_reported(platform: AIPlatformPlatform) -> None:
    _, handle = submit(platform)
    platform.service.inject("cancel", "invalid")
    with pytest.raises(SubmitError, match="400 INVALID_ARGUMENT"):
        platform.backend().cancel(handle)


def test_the_handle_string_reconnects_in_a_new_backend(platform: AIPlatformPlatform) -> None:
    _, handle = submit(platform)
    again = JobHandle.loads(str(handle))
    assert again == handle
    assert platform.backend().status(again).state is JobState.QUEUED


def test_logs_point_to_cloud_logging(platform: AIPlatformPlatform) -> None:
    _, handle = submit(platform)
    lines = list(platform.backend().logs(handle))
    assert any(f'resource.labels.job_id="{handle.job_id}"' in line for line in lines)
    assert any(line.startswith("gcloud logging read") and "--project=my-project" in line for line in lines)


def test_the_state_map_covers_the_discovery_documents_enum() -> None:
    assert tuple(STATE_MAP) == NATIVE_STATES


def test_the_endpoint_is_not_part_of_the_identity() -> None:
    plain = render()
    mtls = render(endpoint="https://ml.mtls.googleapis.com")
    assert mtls.create.url != plain.create.url
    assert (mtls.identity, mtls.fingerprint) == (plain.identity, plain.fingerprint)
    assert render(project="other").fingerprint != plain.fingerprint


# -- the adaptor: google-auth and requests failures as crosstrain's three kinds ----------------------------------
class RecordingAdapter(HTTPAdapter):
    """Records the timeout of every call that goes through it."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[Any] = []

    def send(
        self,
        request: PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: dict[str, str] | None = None,
    ) -> requests.Response:
        self.timeouts.append(timeout)
        return super().send(request, stream, timeout, verify, cert, proxies)


class TokenEndpoint(LoopbackService):
    """Google's OAuth token endpoint for a refresh token it no longer honours."""

    def operation(self, call: Call) -> str:
        return "token"

    def answer(self, call: Call) -> Reply:
        return Reply(400, {"error": "invalid_grant", "error_description": "Token has been expired or revoked."})


def user_session(token_uri: str) -> requests.Session:
    """An AuthorizedSession with user credentials whose token must be refreshed at `token_uri` first."""
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2.credentials import Credentials

    credentials = Credentials(None, refresh_token="r", client_id="c", client_secret="s", token_uri=token_uri)  # type: ignore[no-untyped-call]
    session: requests.Session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
    session.trust_env = False
    return session


def test_every_call_has_the_policys_timeout(platform: AIPlatformPlatform) -> None:
    session, adapter = loopback_session(), RecordingAdapter()
    session.mount("http://", adapter)
    made = AIPlatformBackend(session=session, retry=RetryPolicy(sleep=lambda s: None, call_timeout=7), environ={})
    request = made.render(job_from_dict(BASE_JOB), dict(platform.settings))
    handle = made.send(request)
    made.send(request)  # 409, then a read
    made.status(handle)
    made.cancel(handle)
    assert len(adapter.timeouts) == 5
    assert set(adapter.timeouts) == {7}


def test_an_expired_refresh_token_is_final_with_the_fix(platform: AIPlatformPlatform) -> None:
    tokens = TokenEndpoint()
    with serving(tokens) as url:
        made = AIPlatformBackend(
            session=user_session(f"{url}/token"), retry=RetryPolicy(sleep=lambda s: None), environ={}
        )
        with pytest.raises(SubmitError, match="gcloud auth application-default login") as refused:
            made.send(made.render(job_from_dict(BASE_JOB), dict(platform.settings)))
    assert "invalid_grant" in str(refused.value)
    assert not isinstance(refused.value, TransientError)
    assert not refused.value.job_may_exist
    assert len(tokens.received) == 1  # not retried
    assert not platform.service.received  # nothing was sent


def test_an_unreachable_token_endpoint_is_a_refusal(platform: AIPlatformPlatform) -> None:
    """Offline: the token refresh fails before the call is sent, so the create is retried freely, and the
    final error does not say a job may exist."""
    made = AIPlatformBackend(
        session=user_session("http://127.0.0.1:9/token"), retry=RetryPolicy(sleep=lambda s: None), environ={}
    )
    with pytest.raises(TransientError, match="token endpoint") as refused:
        made.send(made.render(job_from_dict(BASE_JOB), dict(platform.settings)))
    assert refused.value.accepted is False
    assert not refused.value.job_may_exist
    assert not platform.service.received


def test_no_credentials_is_final_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(SubmitError, match="gcloud auth application-default login"):
        authorized_session()


def test_a_refused_connection_is_retried_and_reported_as_never_sent() -> None:
    made = AIPlatformBackend(session=loopback_session(), retry=RetryPolicy(sleep=lambda s: None), environ={})
    request = made.render(job_from_dict(BASE_JOB), {**SETTINGS, "endpoint": "http://127.0.0.1:9"})
    with pytest.raises(TransientError, match="could not connect") as refused:
        made.send(request)
    assert refused.value.accepted is False
    assert not refused.value.job_may_exist


def test_a_missing_google_auth_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)
    with pytest.raises(MissingDependency, match=r"pip install 'crosstrain\[aiplatform\]'"):
        authorized_session()


def test_list_is_refused_with_the_shutdown(platform: AIPlatformPlatform) -> None:
    with pytest.raises(Unsupported, match="shut down"):
        list(platform.backend().list_jobs())


# -- scale tiers ---------------------------------------------------------------------------------------------------
SINGLE = {"workers": {"replicas": 0}}


@pytest.mark.parametrize(
    ("tier", "framework"), [("BASIC", "pytorch"), ("BASIC_GPU", "pytorch"), ("BASIC_TPU", "tensorflow")]
)
def test_a_single_machine_tier_renders_the_tier_and_no_machine(tier: str, framework: str) -> None:
    request = render({**SINGLE, "primary": {"machine": tier}, "launch": {"framework": framework}})
    assert_valid(request)
    training = request.create.body["trainingInput"]
    assert training["scaleTier"] == tier
    assert not {"masterType", "workerType", "workerCount", "parameterServerType", "parameterServerCount"} & set(
        training
    )
    assert "acceleratorConfig" not in training["masterConfig"]
    assert training["masterConfig"]["imageUri"] == BASE_JOB["image"]
    assert any(f"scale tier {tier}" in note for note in request.notes)


def test_a_tier_that_sizes_its_own_cluster_renders_for_tensorflow() -> None:
    request = render({**SINGLE, "primary": {"machine": "STANDARD_1"}, "launch": {"framework": "tensorflow"}})
    assert_valid(request)
    assert request.create.body["trainingInput"]["scaleTier"] == "STANDARD_1"


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"primary": {"machine": "BASIC_GPU"}}, "workers.replicas", "single machine"),
        (
            {**SINGLE, "primary": {"machine": "BASIC_GPU"}, "parameter_servers": {"replicas": 1}},
            "parameter_servers.replicas",
            "single machine",
        ),
        (
            {"primary": {"machine": "STANDARD_1"}, "launch": {"framework": "tensorflow"}},
            "workers.replicas",
            "chooses the number of workers",
        ),
        (
            {**SINGLE, "primary": {"machine": {"type": "BASIC", "accelerator": {"type": "T4"}}}},
            "primary.machine.accelerator",
            "no GPU",
        ),
        (
            {**SINGLE, "primary": {"machine": {"type": "BASIC_GPU", "accelerator": {"type": "V100", "count": 2}}}},
            "primary.machine.accelerator",
            "one GPU of its own",
        ),
        ({**SINGLE, "primary": {"machine": "PREMIUM_1"}}, "primary.machine", "PyTorch launch"),
        ({**SINGLE, "primary": {"machine": "BASIC_TPU"}}, "primary.machine", "torch_xla"),
        ({"workers": {"machine": "BASIC"}}, "workers.machine.type", "not one pool's machine"),
    ],
)
def test_what_contradicts_a_tier_is_refused(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(Unsupported) as caught:
        render(changes)
    assert any(p.path == path and words in p.message and p.fix for p in caught.value.problems), caught.value.problems


def test_local_emulation_of_a_tier_runs_its_one_machine() -> None:
    spec = job_from_dict(merge(BASE_JOB, {**SINGLE, "primary": {"machine": "BASIC_GPU"}}))
    request = create_backend("local", environ={}).render(spec, {"emulate": "aiplatform"})
    assert len({p["node"] for p in request.create.body["processes"]}) == 1
    with pytest.raises(Unsupported, match="scale tier of AI Platform Training"):
        create_backend("local", environ={}).render(spec)
    # A tier that sizes its own cluster is a TensorFlow job, which the local target does not run.
    sized = job_from_dict(
        merge(BASE_JOB, {**SINGLE, "primary": {"machine": "STANDARD_1"}, "launch": {"framework": "tensorflow"}})
    )
    with pytest.raises(Unsupported, match="cannot run tensorflow"):
        create_backend("local", environ={}).render(sized, {"emulate": "aiplatform"})


# -- TensorFlow: AI Platform sets TF_CONFIG itself and runs parameter servers ---------------------------------------
def test_tensorflow_renders_with_parameter_servers_and_no_launcher() -> None:
    request = render(
        {"launch": {"framework": "tensorflow"}, "parameter_servers": {"replicas": 2, "machine": "n1-highmem-8"}}
    )
    assert_valid(request)
    training = request.create.body["trainingInput"]
    assert (training["parameterServerType"], training["parameterServerCount"]) == ("n1-highmem-8", "2")
    assert training["useChiefInTfConfig"] is True
    for config in ("masterConfig", "workerConfig", "parameterServerConfig"):
        assert "crosstrain.launch" not in training[config]["containerCommand"]
