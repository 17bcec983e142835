"""targets.azureml.build: an environment Azure ML builds from a Docker build context, against the real
azure-ai-ml 1.35.2. Its version and body are `Environment(build=BuildContext(path=...))`'s, the render lists the
calls `MLClient.jobs.create_or_update` makes for it (read the default blob store and its secret, upload the
folder there, register the anonymous environment), submit makes them against the fake workspace and Azurite, and
the az-yaml form loads with `load_job` as the same environment."""

from __future__ import annotations

import functools
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosstrain import folders, packaging
from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import AML_IGNORE_FILES, ANONYMOUS_ENVIRONMENT, STORE_CONTAINER
from crosstrain.backends.azureml.wire import build_environment_version, object_hash
from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import Request
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.spec import TrainingJob
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.azureml_cloud import (
    AZURITE_ACCOUNT,
    SUBSCRIPTION,
    WORKSPACE,
    AzureMLService,
    AzureMLTransport,
    FakeCredential,
    LoopbackTransport,
    blob_container,
)
from tests.backends.validators import azureml as azureml_problems

SETTINGS = {**WORKSPACE, "compute": "cpu-cluster"}
ARM = "https://management.azure.com"
ARM_WS = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/my-rg/providers/Microsoft.MachineLearningServices/workspaces/my-ws"
)
#: The account URL azure-ai-ml makes of the fake's blob store (`https://<accountName>.blob.<endpoint>`).
STORE_ACCOUNT = f"https://{AZURITE_ACCOUNT}.blob.core.windows.net"


@pytest.fixture(autouse=True)
def _quiet_sdk() -> Iterator[None]:
    """azure-ai-ml logs "experimental class" notices at import and use."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def context(root: Path) -> Path:
    """A build context beside the job file: a Dockerfile, what it copies, a nested folder, an empty one, and
    names whose order differs by case (azure-ai-ml's hash orders them lower-cased)."""
    folder = root / "docker-context"
    (folder / "conf").mkdir(parents=True)
    (folder / "empty").mkdir()
    (folder / "Dockerfile").write_text(
        "FROM python:3.11-slim\nCOPY requirements.txt .\nRUN pip install -r requirements.txt\n"
    )
    (folder / "requirements.txt").write_text("numpy==1.26.4\n")
    (folder / "conf" / "B.cfg").write_text("b\n")
    (folder / "conf" / "a.cfg").write_text("a\n")
    return folder


def job(root: Path, **changes: Any) -> TrainingJob:
    """BASE_JOB without its image (the Dockerfile names the base), located in `root`."""
    return job_from_dict(merge(BASE_JOB, {"image": None, **changes})).located(root)


def render(spec: TrainingJob, **settings: Any) -> Request:
    return create_backend("azureml", environ={}).render(spec, {**SETTINGS, **settings})


def build_calls(request: Request) -> list[Any]:
    """The datastore read, its secret, the upload and the environment PUT."""
    i = next(i for i, call in enumerate(request.calls) if call.url.startswith(STORE_CONTAINER))
    return list(request.calls[i - 2 : i + 2])


def filled(value: Any, container: str) -> Any:
    """`value` with the blob store's container URL where the render has its placeholder (as submit fills it)."""
    return json.loads(json.dumps(value).replace(STORE_CONTAINER, container))


# -- the environment: azure-ai-ml's version and body -----------------------------------------------------------
@pytest.mark.parametrize("dockerfile", [None, "Dockerfile", "conf/../Dockerfile"])
def test_the_version_and_the_environment_body_are_the_sdks(tmp_path: Path, dockerfile: str | None) -> None:
    """`Environment(build=BuildContext(path=..., dockerfile_path=...))`: its anonymous name and version (a digest
    of the folder's object hash, and of the Dockerfile path where one is given), where its upload goes, and the
    body its REST object serialises to once the upload has set `build.path`, as `_check_and_upload_env_build_
    context` does."""
    from azure.ai.ml.entities import BuildContext, Environment

    folder = context(tmp_path)
    build = {"path": "docker-context", **({"dockerfile_path": dockerfile} if dockerfile else {})}
    request = render(job(tmp_path), build=build)
    sdk = Environment(build=BuildContext(path=str(folder), dockerfile_path=dockerfile))
    assert sdk._upload_hash is not None
    assert sdk.build is not None
    assert (sdk.name, sdk.version) == (ANONYMOUS_ENVIRONMENT, build_environment_version(sdk._upload_hash, dockerfile))
    _, _, upload, register = build_calls(request)
    assert register.url == (
        f"{ARM}{ARM_WS}/environments/{ANONYMOUS_ENVIRONMENT}/versions/{sdk.version}?api-version=2023-04-01-preview"
    )
    assert (
        request.create.body["properties"]["environmentId"] == f"{ARM_WS}/environments/{sdk.name}/versions/{sdk.version}"
    )
    prefix = f"LocalUpload/{sdk._upload_hash}/docker-context"  # the SDK's `upload`: LocalUpload/<hash>/<folder name>
    assert upload.url == f"{STORE_CONTAINER}/{prefix}/"
    assert upload.body["hash"] == sdk._upload_hash
    container = f"{STORE_ACCOUNT}/azureml-blobstore-0"
    sdk.build.path = f"{container}/{prefix}/"  # what the SDK sets once it has uploaded the folder
    assert filled(register.body, container) == sdk._to_rest_object().as_dict()


def test_the_object_hash_is_the_sdks_for_links_and_odd_names(tmp_path: Path) -> None:
    """Names that sort differently lower-cased, a link to a file and one to a folder inside the context (read as
    what they point to, named by the link), a name with a space and one that is not ASCII."""
    from azure.ai.ml._utils._asset_utils import get_object_hash

    folder = context(tmp_path)
    (folder / "Zeta").mkdir()
    (folder / "Zeta" / "x.txt").write_text("x\n")
    (folder / "alpha b.txt").write_text("space\n")
    (folder / "données.txt").write_text("é\n")
    (folder / "req-link.txt").symlink_to("requirements.txt")
    (folder / "conf-link").symlink_to("conf")
    listed = folders.folder("docker-context", tmp_path, field="targets.azureml.build.path", noun="build context")
    assert object_hash(listed) == get_object_hash(folder)


def test_the_render_lists_the_sdks_calls_and_the_job_runs_in_the_built_environment(tmp_path: Path) -> None:
    folder = context(tmp_path)
    request = render(job(tmp_path), build={"path": "docker-context"})
    listed = folders.folder(
        "docker-context",
        tmp_path,
        field="targets.azureml.build.path",
        noun="build context",
        ignore_files=AML_IGNORE_FILES,
    )
    upload_hash = object_hash(listed)
    version = build_environment_version(upload_hash)
    store = f"{ARM}{ARM_WS}/datastores/workspaceblobstore"
    assert [(c.method, c.url.split("?")[0]) for c in request.calls] == [
        ("GET", request.create.url.split("?")[0]),
        ("GET", store),
        ("POST", f"{store}/listSecrets"),
        ("PUT", f"{STORE_CONTAINER}/LocalUpload/{upload_hash}/docker-context/"),
        ("PUT", f"{ARM}{ARM_WS}/environments/{ANONYMOUS_ENVIRONMENT}/versions/{version}"),
        ("PUT", request.create.url.split("?")[0]),
    ]
    secrets, upload = request.calls[2], request.calls[3]
    assert secrets.body == {"expirableSecret": True, "expireAfterHours": 1}
    assert [b["name"] for b in upload.body["blobs"]] == [
        f"LocalUpload/{upload_hash}/docker-context/{name}"
        for name in ("Dockerfile", "conf/B.cfg", "conf/a.cfg", "requirements.txt")
    ]
    assert request.build_context == listed.ref
    assert request.build_context.folder == str(folder.resolve())
    assert request.create.body["properties"]["environmentId"].endswith(f"/versions/{version}")
    assert any("builds the environment from" in note for note in request.notes)
    assert azureml_problems(request) == []
    assert Request.from_dict(json.loads(request.to_json())) == request  # the folder travels with the request
    # the content is the environment: an edited file is another version, another request
    (folder / "requirements.txt").write_text("numpy==2.0.0\n")
    again = render(job(tmp_path), build={"path": "docker-context"})
    assert again.fingerprint != request.fingerprint
    assert again.create.body["properties"]["environmentId"] != request.create.body["properties"]["environmentId"]


def test_the_build_context_is_read_as_code_is(tmp_path: Path) -> None:
    """git's rules, .amlignore and .crosstrainignore leave files out of the upload (and of the hash); the job file
    lying in the folder is left out too, so editing another target's settings builds no new image."""
    folder = context(tmp_path)
    (folder / "notes.md").write_text("draft\n")
    (folder / ".amlignore").write_text("*.md\n")
    (folder / "job.yaml").write_text(
        yaml.safe_dump(merge(BASE_JOB, {"image": None, "targets": {"azureml": {**SETTINGS, "build": {"path": "."}}}}))
    )
    request = create_backend("azureml", environ={}).render(load_job(folder / "job.yaml"))
    names = [b["name"].rsplit("docker-context/", 1)[1] for b in build_calls(request)[2].body["blobs"]]
    assert names == [".amlignore", "Dockerfile", "conf/B.cfg", "conf/a.cfg", "requirements.txt"]
    assert request.build_context is not None
    assert request.build_context.job_file == "job.yaml"
    assert any("less the job file job.yaml and what .amlignore leaves out" in note for note in request.notes)


# -- refusals: a path, a reason, a fix ------------------------------------------------------------------------
def refused(spec: TrainingJob, **settings: Any) -> list[Any]:
    with pytest.raises(SpecError) as caught:
        render(spec, **settings)
    problems = list(caught.value.problems)
    assert all(p.path and p.message and p.fix for p in problems), problems
    return problems


@pytest.mark.parametrize(
    ("changes", "settings", "named"),
    [
        ({"image": "registry.example/train:1.0"}, {}, "`image`"),
        ({"environment": "pytorch"}, {}, "`environment`"),
        ({}, {"environment": "azureml:my-env:3"}, "targets.azureml.environment"),
        (
            {"image": "registry.example/train:1.0"},
            {"conda_file": "conda.yml"},
            "`image` and targets.azureml.conda_file",
        ),
    ],
)
def test_an_environment_named_beside_the_build_context_is_refused(
    tmp_path: Path, changes: dict[str, Any], settings: dict[str, Any], named: str
) -> None:
    """The Dockerfile's FROM names the base image: a job that also names an image, an environment or a conda
    file would have two answers to what it runs in (azure-ai-ml refuses `Environment(image=..., build=...)`)."""
    context(tmp_path)
    (tmp_path / "conda.yml").write_text("dependencies: [python=3.11]\n")
    (problem,) = refused(job(tmp_path, **changes), build={"path": "docker-context"}, **settings)
    assert problem.path == "targets.azureml.build"
    assert f"names {named} too" in problem.message
    assert "never both" in problem.message
    assert "Dockerfile" in problem.fix


@pytest.mark.parametrize(
    ("build", "path", "says"),
    [
        ({"path": "missing"}, "targets.azureml.build.path", "does not exist"),
        ({"path": "../elsewhere"}, "targets.azureml.build.path", "outside the job's folder"),
        ({"path": "docker-context/Dockerfile"}, "targets.azureml.build.path", "is not a folder"),
        (
            {"path": "docker-context", "dockerfile_path": "Dockerfile.gpu"},
            "targets.azureml.build.dockerfile_path",
            "holds no Dockerfile.gpu",
        ),
        (
            {"path": "docker-context", "dockerfile_path": "../Dockerfile"},
            "targets.azureml.build.dockerfile_path",
            "not a path under",
        ),
        (
            {"path": "docker-context", "dockerfile_path": "/Dockerfile"},
            "targets.azureml.build.dockerfile_path",
            "not a path under",
        ),
        ({"path": "docker-context/conf"}, "targets.azureml.build.path", "holds no Dockerfile"),
    ],
)
def test_a_context_that_cannot_be_built_is_refused(tmp_path: Path, build: dict[str, str], path: str, says: str) -> None:
    context(tmp_path)
    (problem,) = refused(job(tmp_path), build=build)
    assert problem.path == path
    assert says in problem.message


def test_a_dockerfile_an_ignore_file_leaves_out_is_refused(tmp_path: Path) -> None:
    folder = context(tmp_path)
    (folder / ".amlignore").write_text("Dockerfile\n")
    (problem,) = refused(job(tmp_path), build={"path": "docker-context"})
    assert "or an ignore file leaves it out" in problem.message


def test_a_link_out_of_the_context_and_a_context_too_large_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crosstrain.backends.azureml import plan

    folder = context(tmp_path)
    (folder / "secrets").symlink_to("/etc")
    (problem,) = refused(job(tmp_path), build={"path": "docker-context"})
    assert problem.path == "targets.azureml.build.path: secrets"
    assert "leaves the build context" in problem.message
    (folder / "secrets").unlink()
    monkeypatch.setattr(plan, "_BUILD_LIMITS", packaging.Limits(max_bytes=64, description="at most 64 bytes here"))
    (problem,) = refused(job(tmp_path), build={"path": "docker-context"})
    assert problem.path == "targets.azureml.build.path"
    assert "at most 64 bytes here" in problem.message


def test_other_targets_do_not_read_it(tmp_path: Path) -> None:
    """The spec has no field for an image built at submit (each platform's `image` is a built one), so the build
    context is Azure ML's setting: elsewhere the job still needs the image the Dockerfile would make."""
    context(tmp_path)
    spec = job(tmp_path, targets={"azureml": {**SETTINGS, "build": {"path": "docker-context"}}})
    with pytest.raises(Unsupported) as caught:
        create_backend("vertex", environ={}).render(spec, {"project": "my-project", "region": "us-central1"})
    assert any(p.path == "primary.image" for p in caught.value.problems)
    pushed = create_backend("vertex", environ={}).render(
        job(tmp_path, image="us-docker.pkg.dev/p/r/train:1", targets=spec.targets),
        {"project": "my-project", "region": "us-central1"},
    )
    assert pushed.build_context is None


def test_local_emulation_renders_the_build_context_and_runs_the_command_here(tmp_path: Path) -> None:
    """`--local --emulate azureml` puts a placeholder image on a job without one, which a build context refuses:
    with `targets.azureml.build`, the job is rendered as Azure ML would be, and nothing is built here."""
    context(tmp_path)
    spec = job(tmp_path, targets={"azureml": {"build": {"path": "docker-context"}}})
    request = create_backend("local", environ={}).render(spec, {"workdir": str(tmp_path / "run"), "emulate": "azureml"})
    assert any("azureml: Azure ML builds the environment from" in note for note in request.notes)
    assert "local-emulation/no-image" not in request.to_json()


# -- the az-yaml form -------------------------------------------------------------------------------------------
def test_az_yaml_names_the_folder_and_loads_as_the_same_environment(tmp_path: Path) -> None:
    from azure.ai.ml import load_job as sdk_load_job
    from azure.ai.ml.entities import Command

    folder = context(tmp_path)
    for build in ({"path": "docker-context"}, {"path": "docker-context", "dockerfile_path": "Dockerfile"}):
        request = render(job(tmp_path), build=build)
        text = create_backend("azureml", environ={}).format(request, "az-yaml")
        expected = {"path": str(folder.resolve()), **({"dockerfile_path": "Dockerfile"} if len(build) > 1 else {})}
        assert yaml.safe_load(text)["environment"] == {"build": expected}
        loaded = sdk_load_job(source=io.StringIO(text))
        assert isinstance(loaded, Command)
        assert loaded._validate().passed
        environment_id = request.create.body["properties"]["environmentId"]
        assert (loaded.environment.name, loaded.environment.version) == tuple(environment_id.split("/")[-3::2])


# -- submit: the real SDK against the fake workspace and Azurite --------------------------------------------------
def backend(service: AzureMLService, azurite_url: str) -> AzureMLBackend:
    return AzureMLBackend(
        transport=AzureMLTransport(service),
        storage_transport=LoopbackTransport(azurite_url),  # the blob store's account host, served by Azurite
        credential=FakeCredential(),
        retry=RetryPolicy(sleep=lambda s: None, call_timeout=30),
        environ={},
    )


def sdk_submit(
    folder: Path, service: AzureMLService, azurite_url: str, monkeypatch: pytest.MonkeyPatch, **changes: Any
) -> list[Any]:
    """What `MLClient.jobs.create_or_update(command(environment=Environment(build=...)))` sends, its blob client
    sent to Azurite (the account host the blob store names)."""
    from azure.ai.ml import MLClient, command
    from azure.ai.ml._artifacts import _blob_storage_helper
    from azure.ai.ml.entities import BuildContext, Environment
    from azure.storage.blob import BlobServiceClient

    monkeypatch.setattr(
        _blob_storage_helper,
        "BlobServiceClient",
        functools.partial(BlobServiceClient, transport=LoopbackTransport(azurite_url)),
    )
    monkeypatch.chdir(folder.parent)  # outside a git repository: no git properties on the job
    transport = AzureMLTransport(service)
    ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=transport)
    environment = Environment(build=BuildContext(path=str(folder), **changes))
    ml.jobs.create_or_update(command(command="python -m train", environment=environment, compute="cpu-cluster"))
    return list(transport.requests)


@pytest.mark.parametrize("dockerfile", [None, "Dockerfile"])
def test_the_build_calls_are_the_sdks(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dockerfile: str | None
) -> None:
    """azure-ai-ml's own calls for the environment, against the fake workspace and Azurite, are the render's with
    the blob store's container filled in, and it uploads the blobs the render lists."""
    folder = context(tmp_path)
    build = {"path": "docker-context", **({"dockerfile_path": dockerfile} if dockerfile else {})}
    request = render(job(tmp_path), build=build)
    service = AzureMLService(blob_endpoint=azurite_url, container=f"sdk-{dockerfile is None}".lower())
    sent = sdk_submit(folder, service, azurite_url, monkeypatch, dockerfile_path=dockerfile)
    container = f"{STORE_ACCOUNT}/{service.container}"
    store, secrets, upload, register = build_calls(request)
    assert [(s.method, s.url, s.body) for s in sent[:-1]] == [
        (store.method, store.url, store.body),
        (secrets.method, secrets.url, secrets.body),
        (register.method, register.url, filled(register.body, container)),
    ]
    assert sent[-1].body["properties"]["environmentId"] == request.create.body["properties"]["environmentId"]
    listed = {
        b.name: b.metadata for b in blob_container(azurite_url, service.container).list_blobs(include=["metadata"])
    }
    assert sorted(listed) == [b["name"] for b in upload.body["blobs"]]
    version = register.url.split("?")[0].rsplit("/", 1)[1]
    assert listed[upload.body["blobs"][0]["name"]] == {
        "upload_status": "completed",
        "name": ANONYMOUS_ENVIRONMENT,
        "version": version,
    }


def test_submit_uploads_the_context_once_and_registers_the_environment(azurite_url: str, tmp_path: Path) -> None:
    folder = context(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="submits")
    ml = backend(service, azurite_url)
    spec = job(tmp_path)
    request = ml.render(spec, {**SETTINGS, "build": {"path": "docker-context"}})
    first = ml.send(request)
    operations = [(service.operation(c), c.method) for c in service.received]
    assert operations == [
        ("find", "GET"),
        ("datastore", "GET"),
        ("datastore-secrets", "POST"),
        ("environment", "PUT"),
        ("create", "PUT"),
    ]
    container = blob_container(azurite_url, "submits")
    upload = build_calls(request)[2]
    prefix = upload.url.removeprefix(f"{STORE_CONTAINER}/")
    uploaded = {b.name.removeprefix(prefix): container.download_blob(b.name).readall() for b in container.list_blobs()}
    assert uploaded == {
        path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()
    }
    environment_id = request.create.body["properties"]["environmentId"]
    stored = service.resources[environment_id]["properties"]
    assert stored["build"] == {"contextUri": f"{STORE_ACCOUNT}/submits/{prefix}"}
    assert service.resources[service.job(first.job_id)]["properties"]["environmentId"] == environment_id
    etags = {b.name: b.etag for b in container.list_blobs()}

    # the same context for another run: the blob says it was uploaded, so nothing is; the PUT is idempotent
    service.received.clear()
    second = ml.submit(job(tmp_path, run_id="again"), {**SETTINGS, "build": {"path": "docker-context"}})
    assert second.job_id != first.job_id
    assert {b.name: b.etag for b in container.list_blobs()} == etags
    assert [service.operation(c) for c in service.received] == [
        "find",
        "datastore",
        "datastore-secrets",
        "environment",
        "create",
    ]

    # the same request again: the job is adopted, nothing else is sent
    service.received.clear()
    assert ml.send(request).adopted
    assert [service.operation(c) for c in service.received] == ["find"]


def test_a_context_uploaded_by_the_sdk_is_not_uploaded_again(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = context(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="reuse")
    sdk_submit(folder, service, azurite_url, monkeypatch)
    container = blob_container(azurite_url, "reuse")
    etags = {b.name: b.etag for b in container.list_blobs()}
    environments = {path for path in service.resources if "/environments/" in path}
    handle = backend(service, azurite_url).submit(job(tmp_path), {**SETTINGS, "build": {"path": "docker-context"}})
    assert {b.name: b.etag for b in container.list_blobs()} == etags
    assert {path for path in service.resources if "/environments/" in path} == environments  # the SDK's, found
    assert service.resources[service.job(handle.job_id)]["properties"]["environmentId"] in environments


@pytest.mark.parametrize(
    ("secret", "asked"), [("forbidden", ["datastore", "datastore-secrets"]), ("identity", ["datastore"])]
)
def test_without_the_stores_secret_the_upload_goes_with_the_azure_credential(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secret: str, asked: list[str]
) -> None:
    """As azure-ai-ml's `get_datastore_info`: a store that takes identities is not asked for a secret, and a
    refused secret is no failure; the blob client gets the workspace's credential (Azurite takes no token over
    http, so the client is only looked at here)."""
    from crosstrain.adaptors import azure

    context(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="tokens", store_secret=secret)
    ml = backend(service, azurite_url)
    given: list[Any] = []

    class Looked(Exception):
        """Stops the submit once the blob client is made."""

    def blob_container(account_url: str, container: str, credential: Any, **kwargs: Any) -> Any:
        given.append((account_url, container, credential))
        raise Looked

    monkeypatch.setattr(azure, "blob_container", blob_container)
    with pytest.raises(Looked):
        ml.submit(job(tmp_path), {**SETTINGS, "build": {"path": "docker-context"}})
    assert given == [(STORE_ACCOUNT, "tokens", ml.credential)]
    assert [service.operation(c) for c in service.received] == ["find", *asked]


def test_a_context_changed_after_render_is_refused_before_anything_is_uploaded(
    azurite_url: str, tmp_path: Path
) -> None:
    folder = context(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="changed")
    ml = backend(service, azurite_url)
    request = ml.render(job(tmp_path), {**SETTINGS, "build": {"path": "docker-context"}})
    (folder / "requirements.txt").write_text("numpy==2.0.0\n")
    with pytest.raises(SpecError, match="changed since the request was rendered") as caught:
        ml.send(request)
    assert caught.value.problems[0].path == "targets.azureml.build.path"
    assert [service.operation(c) for c in service.received] == ["find"]
    assert not blob_container(azurite_url, "changed").exists()  # not even the container: nothing was uploaded


def test_a_request_without_its_folder_is_refused_before_anything_is_sent(azurite_url: str, tmp_path: Path) -> None:
    import dataclasses

    context(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="nameless")
    ml = backend(service, azurite_url)
    request = ml.render(job(tmp_path), {**SETTINGS, "build": {"path": "docker-context"}})
    with pytest.raises(SpecError, match="uploads a build context but names no folder"):
        ml.send(dataclasses.replace(request, build_context=None))
    assert service.received == []
