"""Credentials go only to the hosts this machine is configured for, never to one read from a handle or a request.

Each cloud backend gets a crafted handle and an edited request aimed at `Listener`, a plain TCP listener on
127.0.0.1 that records every connection, with real credentials available as the platform's own SDK finds them
(`DATABRICKS_TOKEN`; Application Default Credentials from GOOGLE_APPLICATION_CREDENTIALS; an Azure token
credential that records being asked). The listener must see no connection at all, the credential must never be
asked for a token, and the refusal (exit 2) must name both the handle's value and the configured one. Control
tests show that the same credentials do reach the listener when a client is pointed at it directly, so the
refusals are what keeps them away; positive tests show the configured host still works.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends.aiplatform.backend import AIPlatformBackend
from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import STATE_MAP
from crosstrain.backends.loopback import Call, Reply
from crosstrain.backends.vertex.backend import VertexBackend
from crosstrain.cli import main
from crosstrain.errors import NotConfigured, SpecError, TransientError
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, Request
from crosstrain.registry import BUILTIN_BACKENDS, create_backend, get_backend_class
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB
from tests.backends.aiplatform_server import AIPlatformPlatform, MLService
from tests.backends.azureml_cloud import WORKSPACE, AzureMLPlatform, FakeCredential
from tests.backends.databricks_workspace import DatabricksPlatform, DatabricksWorkspace
from tests.conftest import ROOT

#: The access token in the Application Default Credentials the Google tests use.
GOOGLE_TOKEN = "ya29.the-users-own-token"
DATABRICKS_TOKEN = "dapi-the-users-own-token"
WORKSPACE_HOST = "https://dbc-1234abcd-5678.cloud.databricks.com"


class Listener:
    """A TCP listener on 127.0.0.1 that records every connection and the bytes it receives; it answers an HTTP
    request with `reply` (JSON), and anything else (a TLS hello) by closing."""

    def __init__(self, reply: Any = None) -> None:
        self.reply = json.dumps(reply if reply is not None else {}).encode()
        self.received: list[bytes] = []
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self.host = self.url.removeprefix("http://")

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._server.accept()
            except TimeoutError:
                continue
            with connection:
                data = self._read(connection)
                self.received.append(data)
                if data[:1].isalpha():  # an HTTP request line
                    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    connection.sendall(head + b"Content-Length: %d\r\n\r\n" % len(self.reply) + self.reply)

    @staticmethod
    def _read(connection: socket.socket) -> bytes:
        connection.settimeout(2.0)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                data += chunk
                if data[:1] == b"\x16":  # a TLS handshake: nothing readable follows
                    break
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            while len(body) < length:
                chunk = connection.recv(65536)
                if not chunk:
                    break
                body += chunk
                data += chunk
        except OSError:
            pass
        return data

    def authorization(self) -> list[str]:
        """The Authorization headers the listener received."""
        found = []
        for data in self.received:
            for line in data.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"authorization":
                    found.append(value.strip().decode())
        return found


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as running:
        yield running


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """No ambient cloud configuration or proxies; HOME is empty (no ~/.databrickscfg). Returns the environment."""
    prefixes = ("DATABRICKS_", "GOOGLE_", "CLOUDSDK_", "GCLOUD_", "AZURE", "CROSSTRAIN_", "CLOUD_ML_")
    for name in list(os.environ):
        if name.startswith(prefixes) or name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return dict(os.environ)


@pytest.fixture
def google_adc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_env: dict[str, str]) -> dict[str, str]:
    """Application Default Credentials as `gcloud auth application-default login` leaves them, holding a valid
    access token (so no token endpoint is involved: every request carries `Bearer GOOGLE_TOKEN`)."""
    adc = tmp_path / "adc.json"
    adc.write_text(
        json.dumps(
            {
                "type": "authorized_user",
                "client_id": "id.apps.googleusercontent.com",
                "client_secret": "secret",
                "refresh_token": "1//refresh",
                "token": GOOGLE_TOKEN,
                "expiry": "2999-01-01T00:00:00Z",
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(adc))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # never ask a metadata server
    return dict(os.environ)


def cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        timeout=120,
        cwd=ROOT,
    )


def refused(done: subprocess.CompletedProcess[str], *values: str) -> str:
    """Assert the CLI refused with exit 2, naming every value; returns stderr."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    for value in values:
        assert value in done.stderr, (value, done.stderr)
    return done.stderr


def authorization(call: Call) -> str | None:
    """The Authorization header a loopback service received (header names ignore case)."""
    return next((value for name, value in call.headers.items() if name.lower() == "authorization"), None)


def handle(target: str, ref: dict[str, Any], job_id: str = "1") -> str:
    return json.dumps({"target": target, "identity": "x", "job_id": job_id, "ref": ref})


# -- Databricks ------------------------------------------------------------------------------------------------
def test_control_the_databricks_token_reaches_any_host_a_client_is_made_for(
    clean_env: dict[str, str], listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without crosstrain's check, the SDK sends the ambient token wherever the host says."""
    from crosstrain.adaptors.databricks import workspace_client

    monkeypatch.setenv("DATABRICKS_TOKEN", DATABRICKS_TOKEN)
    client = workspace_client(listener.url, timeout=2.0)
    client.jobs.get_run(1)
    assert f"Bearer {DATABRICKS_TOKEN}" in listener.authorization()


@pytest.mark.parametrize("verb", ["status", "wait", "cancel", "logs"])
def test_a_crafted_databricks_handle_sends_nothing(clean_env: dict[str, str], listener: Listener, verb: str) -> None:
    """The issue's reproduction: `DATABRICKS_TOKEN=dapi-x crosstrain status '<handle for a listener>'`."""
    env = {**clean_env, "DATABRICKS_TOKEN": DATABRICKS_TOKEN}
    done = cli(verb, handle("databricks", {"host": listener.url, "run_id": 1}), env=env)
    refused(done, listener.url, "configures no workspace", f"DATABRICKS_HOST={listener.url}")
    assert listener.received == []


def test_a_databricks_handle_for_another_workspace_names_both(clean_env: dict[str, str], listener: Listener) -> None:
    env = {**clean_env, "DATABRICKS_TOKEN": DATABRICKS_TOKEN, "DATABRICKS_HOST": WORKSPACE_HOST}
    done = cli("status", handle("databricks", {"host": listener.url, "run_id": 1}), "--json", env=env)
    stderr = refused(done, listener.url, WORKSPACE_HOST, "(DATABRICKS_HOST)")
    error = json.loads(done.stdout)
    assert error["error"] == "NotConfigured"
    assert error["problems"][0]["path"] == "handle.ref.host"
    assert "nothing was sent" in stderr
    assert listener.received == []


def test_a_databricks_profile_binds_its_own_host(clean_env: dict[str, str], listener: Listener, tmp_path: Path) -> None:
    """A handle may name one of the user's profiles, but not send that profile's token to another host."""
    (tmp_path / "home" / ".databrickscfg").write_text(
        f"[DEFAULT]\nhost = {WORKSPACE_HOST}\ntoken = dapi-default\n\n"
        f"[prod]\nhost = {WORKSPACE_HOST}\ntoken = dapi-prod\n"
    )
    for ref in ({"host": listener.url, "run_id": 1}, {"host": listener.url, "profile": "prod", "run_id": 1}):
        done = cli("status", handle("databricks", ref), env=clean_env)
        refused(done, listener.url, WORKSPACE_HOST, ".databrickscfg")
    assert listener.received == []


def test_a_profile_for_another_workspace_is_refused(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The configured host, with a handle naming a profile of another workspace: its token would leak there."""
    (tmp_path / "home" / ".databrickscfg").write_text("[other]\nhost = https://other.cloud.databricks.com\ntoken = t\n")
    backend = create_backend("databricks", settings={"host": WORKSPACE_HOST})
    crafted = JobHandle.loads(handle("databricks", {"host": WORKSPACE_HOST, "profile": "other", "run_id": 1}))
    with pytest.raises(NotConfigured) as error:
        backend.status(crafted)
    assert error.value.problems[0].path == "handle.ref.profile"
    assert "https://other.cloud.databricks.com" in str(error.value)


def test_an_edited_databricks_request_sends_nothing(
    clean_env: dict[str, str], listener: Listener, tmp_path: Path
) -> None:
    env = {**clean_env, "DATABRICKS_TOKEN": DATABRICKS_TOKEN, "DATABRICKS_HOST": WORKSPACE_HOST}
    job = {**BASE_JOB, "targets": {"databricks": {"host": WORKSPACE_HOST}}}
    request = create_backend("databricks", environ={}).render(job_from_dict(job)).to_dict()
    edits = {
        "host": {**request, "settings": {**request["settings"], "host": listener.url}},
        "url": {
            **request,
            "calls": [{**call, "url": listener.url + "/api/2.2/jobs/runs/submit"} for call in request["calls"]],
        },
    }
    for name, edited in edits.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(edited))
        refused(cli("submit", str(path), env=env), listener.url)
    assert listener.received == []


def test_the_configured_databricks_host_gets_the_token(clean_env: dict[str, str], tmp_path: Path) -> None:
    """Positive: a handle for the configured workspace works from the CLI, by environment or by --set, and
    the user's token reaches it; a request file for it is sent."""
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        made = backend.send(backend.render(job_from_dict(BASE_JOB), platform.settings))
        text = made.dumps()
        env = {**clean_env, "DATABRICKS_TOKEN": DATABRICKS_TOKEN}
        by_env = cli("status", text, env={**env, "DATABRICKS_HOST": platform.url})
        by_set = cli("status", text, "--set", f"host={platform.url}", env=env)
        request = backend.render(job_from_dict({**BASE_JOB, "run_id": "other"}), platform.settings)
        (tmp_path / "request.json").write_text(request.to_json())
        sent = cli("submit", str(tmp_path / "request.json"), "--set", f"host={platform.url}", env=env)
    for done in (by_env, by_set, sent):
        assert done.returncode == 0, done.stderr
    assert by_env.stdout.split("\t")[0] in ("QUEUED", "RUNNING", "SUCCEEDED")
    tokens = {authorization(c) for c in platform.workspace.received if platform.workspace.operation(c) != "metadata"}
    assert f"Bearer {DATABRICKS_TOKEN}" in tokens


def test_a_handle_made_in_this_process_follows_the_job_files_host(clean_env: dict[str, str]) -> None:
    """`submit(job).wait()`: the job file's host is configuration, so its own handle needs no DATABRICKS_HOST;
    the same handle as text, or changed, is checked."""
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        made = backend.submit(job_from_dict(BASE_JOB), platform.settings)
        assert made.origin is backend
        assert made.wait(poll_interval=0.0).state.value == "SUCCEEDED"
        moved = JobHandle.loads(made.dumps().replace(platform.url, "http://127.0.0.1:9"))
        with pytest.raises(NotConfigured, match=r"127\.0\.0\.1:9"):
            backend.status(moved)


def test_credentials_in_a_databricks_host_are_refused_and_never_shown(
    clean_env: dict[str, str], listener: Listener
) -> None:
    secret = "s3cr3t-password"
    job = json.dumps({**BASE_JOB, "targets": {"databricks": {}}})
    rendered = cli(
        "render", "-", "--set", f"host=https://user:{secret}@dbc-1.cloud.databricks.com", env=clean_env, stdin=job
    )
    crafted = handle("databricks", {"host": f"http://user:{secret}@{listener.host}", "run_id": 1})
    status = cli("status", crafted, env={**clean_env, "DATABRICKS_HOST": listener.url})
    with_env = cli(
        "status", crafted, env={**clean_env, "DATABRICKS_HOST": f"https://user:{secret}@dbc-1.cloud.databricks.com"}
    )
    for done in (rendered, status, with_env):
        assert done.returncode == 2, done.stderr
        assert secret not in done.stdout + done.stderr
        assert "***@" in done.stderr
    assert listener.received == []


def test_an_unreachable_databricks_host_fails_status_in_seconds(
    clean_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workspace address that drops connections (a full accept queue) costs the connect timeout per attempt,
    not the call timeout: 6 attempts of 0.5 s here, with a call timeout of 30 s that would take 3 minutes."""
    monkeypatch.setenv("DATABRICKS_TOKEN", DATABRICKS_TOKEN)
    with blackhole() as url:
        backend = create_backend(
            "databricks",
            environ={"DATABRICKS_HOST": url},
            retry=RetryPolicy(sleep=lambda s: None, call_timeout=30.0, connect_timeout=0.5),
        )
        start = time.monotonic()
        with pytest.raises(TransientError, match="could not connect") as error:
            backend.status(JobHandle.loads(handle("databricks", {"host": url, "run_id": 1})))
        elapsed = time.monotonic() - start
    assert error.value.accepted is False
    # 6 attempts x 0.5 s, the SDK's one best-effort host probe (0.5 s, then its own sleep of 1-2 s), imports.
    assert elapsed < 10, elapsed


class blackhole:
    """An address whose connections are never answered: a listening socket with a full accept queue, so the
    kernel drops further SYNs, as a firewall or a wrong private address does."""

    def __enter__(self) -> str:
        self.server = socket.create_server(("127.0.0.1", 0), backlog=0)
        port = self.server.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            self.fillers.append(filler)
        time.sleep(0.1)
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: object) -> None:
        for filler in self.fillers:
            filler.close()
        self.server.close()


# -- Google: AI Platform and Vertex AI -------------------------------------------------------------------------
def test_control_google_credentials_reach_any_host_a_client_is_made_for(
    google_adc: dict[str, str], listener: Listener
) -> None:
    from crosstrain.adaptors import gapic, google_rest

    session = google_rest.authorized_session()
    session.get(f"{listener.url}/v1/projects/p/jobs/j", timeout=5)
    client = gapic.job_service_client(listener.url)
    client.get_custom_job(name="projects/p/locations/us-central1/customJobs/1", timeout=5)
    assert listener.authorization() == [f"Bearer {GOOGLE_TOKEN}"] * 2


def test_a_crafted_aiplatform_handle_sends_nothing(google_adc: dict[str, str], listener: Listener) -> None:
    crafted = handle("aiplatform", {"url": f"{listener.url}/v1/projects/p/jobs/j", "project": "p"})
    done = cli("status", crafted, env=google_adc)
    refused(done, listener.url, "https://ml.googleapis.com", f"CROSSTRAIN_AIPLATFORM_ENDPOINT={listener.url}")
    backend = AIPlatformBackend()  # Application Default Credentials, as the CLI loads them
    for verb in ("status", "wait", "cancel", "logs"):
        with pytest.raises(NotConfigured, match=listener.host):
            list(getattr(backend, verb)(JobHandle.loads(crafted)) or [])
    assert backend.session is None  # no credential was loaded
    assert listener.received == []


def test_an_edited_aiplatform_request_sends_nothing(google_adc: dict[str, str], listener: Listener) -> None:
    request = create_backend("aiplatform", environ={}).render(job_from_dict(BASE_JOB), {"project": "p"})
    create = request.create
    edited = Request.from_dict(
        {
            **request.to_dict(),
            "calls": [{**create.to_dict(), "url": create.url.replace("https://ml.googleapis.com", listener.url)}],
        }
    )
    with pytest.raises(NotConfigured) as error:
        create_backend("aiplatform").send(edited)
    assert error.value.problems[0].path == "request.calls[0].url"
    assert listener.url in str(error.value)
    assert listener.received == []


def test_an_aiplatform_handle_for_another_project_is_refused(google_adc: dict[str, str]) -> None:
    crafted = JobHandle.loads(handle("aiplatform", {"url": "https://ml.googleapis.com/v1/projects/theirs/jobs/j"}))
    with pytest.raises(NotConfigured, match=r"'theirs'.*'mine'"):
        create_backend("aiplatform", environ={"GOOGLE_CLOUD_PROJECT": "mine"}).status(crafted)


def test_the_configured_aiplatform_endpoint_gets_the_token(google_adc: dict[str, str]) -> None:
    """Positive, with the user's own credentials: the endpoint set in CROSSTRAIN_AIPLATFORM_ENDPOINT is used."""
    with AIPlatformPlatform(MLService()) as platform:
        made = platform.backend().submit(job_from_dict(BASE_JOB), platform.settings)
        env = {**google_adc, "CROSSTRAIN_AIPLATFORM_ENDPOINT": platform.endpoint}
        done = cli("status", made.dumps(), env=env)
    assert done.returncode == 0, done.stderr
    reads = [c for c in platform.service.received if c.method == "GET"]
    assert reads
    assert authorization(reads[-1]) == f"Bearer {GOOGLE_TOKEN}"


def test_a_crafted_vertex_handle_sends_nothing(google_adc: dict[str, str], listener: Listener) -> None:
    name = "projects/p/locations/us-central1/customJobs/1"
    crafted = handle("vertex", {"name": name, "endpoint": f"http://{listener.host}"})
    refused(cli("status", crafted, env=google_adc), f"http://{listener.host}", "aiplatform.googleapis.com")
    backend = VertexBackend()  # the GAPIC client with Application Default Credentials
    for endpoint in (listener.host, "evil.example", "us-central1-aiplatform.googleapis.com.evil.example"):
        for verb in ("status", "wait", "cancel", "logs"):
            with pytest.raises(NotConfigured, match="not a Vertex AI endpoint"):
                list(
                    getattr(backend, verb)(JobHandle.loads(handle("vertex", {"name": name, "endpoint": endpoint})))
                    or []
                )
    assert not backend._clients  # no client, so no credential, was made
    assert listener.received == []


def test_an_edited_vertex_request_sends_nothing(google_adc: dict[str, str], listener: Listener, tmp_path: Path) -> None:
    request = create_backend("vertex", environ={}).render(job_from_dict(BASE_JOB), {"project": "p"}).to_dict()
    for call in request["calls"]:
        call["url"] = call["url"].replace("https://us-central1-aiplatform.googleapis.com", listener.url)
    (tmp_path / "request.json").write_text(json.dumps(request))
    refused(cli("submit", str(tmp_path / "request.json"), env=google_adc), listener.host)
    assert listener.received == []


def test_a_vertex_handle_for_another_project_is_refused(google_adc: dict[str, str]) -> None:
    name = "projects/theirs/locations/us-central1/customJobs/1"
    crafted = handle("vertex", {"name": name, "endpoint": "us-central1-aiplatform.googleapis.com"})
    done = cli("status", crafted, "--set", "project=mine", env=google_adc)
    refused(done, "'theirs'", "'mine'", "--set project=theirs")
    numbered = JobHandle.loads(crafted.replace("theirs", "123456"))  # a project number cannot be compared
    assert not create_backend("vertex", settings={"project": "mine"}).handle_problems(numbered)


# -- Azure ML ---------------------------------------------------------------------------------------------------
class RecordingCredential:
    """An Azure token credential that records every time it is asked for a token."""

    def __init__(self) -> None:
        self.asked = 0

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        self.asked += 1
        return AccessToken("the-users-arm-token", int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> Any:
        from azure.core.credentials import AccessTokenInfo

        self.asked += 1
        return AccessTokenInfo("the-users-arm-token", int(time.time()) + 3600)


def azure_request() -> Request:
    return create_backend("azureml", environ={}).render(job_from_dict(BASE_JOB), {**WORKSPACE, "compute": "gpu"})


def test_control_the_azure_pipeline_sends_any_url_with_the_token(clean_env: dict[str, str], listener: Listener) -> None:
    """Without the check, the MLClient's pipeline asks for the ARM token and connects to whatever the URL says."""
    from crosstrain.adaptors import azure
    from crosstrain.backends.azureml.wire import _send
    from crosstrain.errors import SubmitError
    from crosstrain.records import HttpCall

    credential = RecordingCredential()
    pipeline = azure.ml_client(credential, *WORKSPACE.values(), timeout=2.0).jobs.service_client_01_2025_preview
    with pytest.raises(SubmitError):
        _send(pipeline, HttpCall("GET", f"https://{listener.host}/subscriptions/x"))
    assert credential.asked == 1
    assert listener.received
    assert listener.received[0][:1] == b"\x16"  # a TLS hello: the token would follow


def test_an_edited_azure_request_sends_nothing(clean_env: dict[str, str], listener: Listener) -> None:
    request = azure_request().to_dict()
    for call in request["calls"]:
        call["url"] = call["url"].replace("https://management.azure.com", f"https://{listener.host}")
    credential = RecordingCredential()
    with pytest.raises(NotConfigured) as error:
        create_backend("azureml", credential=credential, environ={}).send(Request.from_dict(request))
    assert {p.path for p in error.value.problems} == {f"request.calls[{i}].url" for i in range(len(request["calls"]))}
    assert f"https://{listener.host}" in str(error.value)
    assert credential.asked == 0
    assert listener.received == []


def test_an_azure_request_for_another_workspace_is_refused(clean_env: dict[str, str]) -> None:
    """Only ARM gets the token, and only for the configured workspace; a request whose URLs leave its own
    workspace is refused too."""
    request = azure_request()
    credential = RecordingCredential()
    configured = {"AZURE_SUBSCRIPTION_ID": WORKSPACE["subscription_id"], "AZUREML_WORKSPACE_NAME": "other-ws"}
    with pytest.raises(NotConfigured, match=r"'my-ws'.*'other-ws'"):
        create_backend("azureml", credential=credential, environ=configured).send(request)
    moved = request.to_dict()
    moved["calls"][0]["url"] = moved["calls"][0]["url"].replace("/workspaces/my-ws/", "/workspaces/other/")
    with pytest.raises(NotConfigured, match="outside the workspace"):
        create_backend("azureml", credential=credential, environ={}).send(Request.from_dict(moved))
    assert credential.asked == 0


@pytest.mark.parametrize("verb", ["status", "cancel", "logs"])
def test_a_crafted_azure_handle_sends_nothing(clean_env: dict[str, str], verb: str) -> None:
    crafted = JobHandle.loads(handle("azureml", {**WORKSPACE, "workspace": "theirs"}))
    credential = RecordingCredential()
    backend = create_backend("azureml", credential=credential, environ={"AZUREML_WORKSPACE_NAME": "my-ws"})
    with pytest.raises(NotConfigured, match=r"'theirs'.*'my-ws'"):
        list(getattr(backend, verb)(crafted) or [])
    broken = JobHandle.loads(handle("azureml", {**WORKSPACE, "resource_group": "../../x"}))
    with pytest.raises(NotConfigured, match="resource_group"):
        list(getattr(backend, verb)(broken) or [])
    assert credential.asked == 0


def test_the_configured_azure_workspace_is_used(clean_env: dict[str, str]) -> None:
    """Positive: a handle read back as text, for the configured workspace, reads the job."""
    with AzureMLPlatform() as platform:
        made = platform.backend().submit(job_from_dict(BASE_JOB), platform.settings)
        configured = {"AZUREML_WORKSPACE_NAME": WORKSPACE["workspace"].upper()}  # Azure names ignore case
        backend = AzureMLBackend(transport=platform.transport, credential=FakeCredential(), environ=configured)
        before = len(platform.service.received)
        status = backend.status(JobHandle.loads(made.dumps()))
        reads = [platform.service.operation(call) for call in platform.service.received[before:]]
    assert reads == ["get"]
    assert status.native_state in STATE_MAP


# -- the settings themselves --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "settings"),
    [
        ("databricks", {"host": "https://user:pw@dbc-1.cloud.databricks.com"}),
        ("databricks", {"host": WORKSPACE_HOST, "libraries": ["git+https://ghp_token@github.com/o/r"]}),
        ("aiplatform", {"project": "p", "endpoint": "https://user:pw@ml.googleapis.com"}),
    ],
)
def test_settings_with_credentials_in_a_url_are_refused(target: str, settings: dict[str, Any]) -> None:
    with pytest.raises(SpecError) as error:
        create_backend(target, environ={}).render(job_from_dict(BASE_JOB), settings)
    assert "carries credentials" in str(error.value)
    assert "pw@" not in str(error.value)
    assert "ghp_token" not in str(error.value)


# -- what crosstrain prints --------------------------------------------------------------------------------------
PASSWORD = "PW-s3cret-4711"
SETTINGS = [(t, f) for t in BUILTIN_BACKENDS for f in get_backend_class(t).settings_model.model_fields]


@pytest.mark.parametrize(("target", "field"), SETTINGS, ids=[f"{t}.{f}" for t, f in SETTINGS])
def test_no_setting_of_any_target_shows_a_password_given_in_a_url(
    clean_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, field: str
) -> None:
    """Whatever a setting makes of a URL with a password (refused as credentials, as not a number, not one of
    its choices, not a bucket), the password is in no message, as text or as JSON."""
    job = tmp_path / "job.json"
    job.write_text(json.dumps({**BASE_JOB, "targets": {target: {}}}))
    url = f"https://user:{PASSWORD}@example.com/x"
    for extra in ([], ["--json"]):
        code = main(["render", str(job), "-t", target, "--set", f"{target}.{field}={url}", *extra])
        shown = capsys.readouterr()
        assert code == 2, shown.err
        assert f"{target}.{field}" in shown.err  # the setting is what was refused
        assert PASSWORD not in shown.out + shown.err


class EchoingWorkspace(DatabricksWorkspace):
    """A workspace whose errors quote the request's Authorization header, as some gateways and proxies do."""

    def answer(self, call: Call) -> Reply:
        if self.operation(call) in ("create", "get"):
            return self.error(400, f"bad header Authorization: {authorization(call)} (x-request-id 7)")
        return super().answer(call)


@pytest.mark.parametrize("token", ["dapi0123456789abcdef0123456789abcdef", "an-opaque-token-4242"])
def test_an_error_body_echoing_the_token_never_shows_it(clean_env: dict[str, str], token: str) -> None:
    platform = DatabricksPlatform()
    platform.workspace = EchoingWorkspace(late_seconds=0.5)
    with platform:
        env = {**clean_env, "DATABRICKS_HOST": platform.url, "DATABRICKS_TOKEN": token}
        job = json.dumps({**BASE_JOB, "targets": {"databricks": {"cloud": "aws"}}})
        submitted = [cli("submit", "-", *extra, env=env, stdin=job) for extra in ([], ["--json"])]
        made = handle("databricks", {"host": platform.url, "run_id": 1})
        status = [cli("status", made, *extra, env=env) for extra in ([], ["--json"])]
        echoed = [
            authorization(c) for c in platform.workspace.received if platform.workspace.operation(c) != "metadata"
        ]
    assert f"Bearer {token}" in echoed  # the server did echo it
    for done in (*submitted, *status):
        assert done.returncode == 3, done.stderr
        assert "bad header Authorization: Bearer ***" in done.stderr
        assert token not in done.stdout + done.stderr
