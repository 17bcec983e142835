"""Local files and folders as Azure ML inputs, against the real azure-ai-ml 1.35.2. `Input(path=<a local path>)`:
`MLClient.jobs.create_or_update` uploads it to the workspace's default blob store under `LocalUpload/<object
hash>/<name>` and passes the job that upload's `azureml://datastores/workspaceblobstore/paths/...` URI. The render
lists those calls (read the blob store and its secret, upload) with the URI in the job; submit makes them against
the fake workspace and Azurite, once per content; the SDK's own `create_or_update` makes the same calls and blobs.
The machinery is the build context's (tests/backends/test_azureml_build.py)."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosstrain import folders
from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import FINGERPRINT_PROPERTY, INPUT_IGNORE_FILES, STORE_CONTAINER
from crosstrain.backends.azureml.wire import object_hash
from crosstrain.errors import SpecError, SubmitError
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import HttpCall, Request
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.spec import TrainingJob
from crosstrain.testing.conformance import merge
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

SETTINGS = {**WORKSPACE, "compute": "cpu-cluster", "environment": "azureml:my-env:3"}
ARM = "https://management.azure.com"
ARM_WS = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/my-rg/providers/Microsoft.MachineLearningServices/workspaces/my-ws"
)
STORE = f"{ARM}{ARM_WS}/datastores/workspaceblobstore"
#: The account URL azure-ai-ml makes of the fake's blob store (`https://<accountName>.blob.<endpoint>`).
STORE_ACCOUNT = f"https://{AZURITE_ACCOUNT}.blob.core.windows.net"
URI = "azureml://datastores/workspaceblobstore/paths/LocalUpload"


@pytest.fixture(autouse=True)
def _quiet_sdk() -> Iterator[None]:
    """azure-ai-ml logs "experimental class" notices at import and use."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def model(root: Path) -> Path:
    """An MLflow model folder beside the job file (as azureml-examples' cli/assets/model/mlflow-model), with a
    nested folder, an empty one, and names whose order differs by case (azure-ai-ml's hash orders them
    lower-cased)."""
    folder = root / "mlflow-model"
    (folder / "artifacts").mkdir(parents=True)
    (folder / "empty").mkdir()
    (folder / "MLmodel").write_text(
        "artifact_path: model\nflavors:\n  python_function: {loader_module: mlflow.sklearn}\n"
    )
    (folder / "model.pkl").write_bytes(b"\x80\x04 stands for the pickled model\n")
    (folder / "conda.yaml").write_text("dependencies: [python=3.11]\n")
    (folder / "artifacts" / "B.txt").write_text("b\n")
    (folder / "artifacts" / "a.txt").write_text("a\n")
    return folder


def job(root: Path, inputs: dict[str, Any], **changes: Any) -> TrainingJob:
    """A one-node CPU job reading input `m`, located in `root`."""
    spec = {
        "name": "inputs-job",
        "command": ["python", "-m", "train", "--model", "${inputs.m}"],
        "primary": {"machine": "Standard_DS3_v2"},
        "inputs": inputs,
    }
    return job_from_dict(merge(spec, changes)).located(root)


def render(spec: TrainingJob, **settings: Any) -> Request:
    return create_backend("azureml", environ={}).render(spec, {**SETTINGS, **settings})


def upload_call(request: Request, name: str = "m") -> HttpCall:
    return next(c for c in request.calls if c.url.startswith(STORE_CONTAINER) and c.body.get("input") == name)


def sdk_object_hash(path: Path) -> str:
    """azure-ai-ml's own object hash of a local input, with the ignore file it reads there."""
    from azure.ai.ml._utils._asset_utils import get_ignore_file, get_object_hash

    return str(get_object_hash(path, get_ignore_file(path)))


# -- the render: the SDK's URI, hash and calls ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "path", "wire_type", "uri_tail"),
    [
        ("mlflow_model", "mlflow-model", "mlflow_model", "mlflow-model"),
        ("custom_model", "mlflow-model", "custom_model", "mlflow-model"),
        ("folder", "mlflow-model", "uri_folder", "mlflow-model/"),  # the SDK adds a `/` to a uri_folder's only
        ("file", "mlflow-model/MLmodel", "uri_file", "MLmodel"),
        ("custom_model", "mlflow-model/model.pkl", "custom_model", "model.pkl"),
    ],
)
def test_a_local_input_is_the_uri_of_its_upload(
    tmp_path: Path, kind: str, path: str, wire_type: str, uri_tail: str
) -> None:
    model(tmp_path)
    request = render(job(tmp_path, {"m": {"path": path, "type": kind}}))
    upload_hash = sdk_object_hash(tmp_path / path)
    binding = request.create.body["properties"]["inputs"]["m"]
    assert binding == {"uri": f"{URI}/{upload_hash}/{uri_tail}", "jobInputType": wire_type}
    upload = upload_call(request)
    blob = f"LocalUpload/{upload_hash}/{Path(path).name}"
    if (tmp_path / path).is_dir():
        assert upload.url == f"{STORE_CONTAINER}/{blob}/"
        names = ["MLmodel", "artifacts/B.txt", "artifacts/a.txt", "conda.yaml", "model.pkl"]
        assert [b["name"] for b in upload.body["blobs"]] == [f"{blob}/{name}" for name in names]
    else:
        assert upload.url == f"{STORE_CONTAINER}/{blob}"
        assert [b["name"] for b in upload.body["blobs"]] == [blob]  # the file is the blob
    assert upload.body["hash"] == upload_hash
    assert request.inputs["m"].folder == str((tmp_path / path).resolve())
    assert request.create.body["properties"]["command"] == "python -m train --model '${{inputs.m}}'"
    assert azureml_problems(request) == []
    assert Request.from_dict(json.loads(request.to_json())) == request  # the folder travels with the request


def test_the_calls_are_in_the_sdks_order_with_one_read_of_the_blob_store(tmp_path: Path) -> None:
    """The blob store is read once, before its first upload (azure-ai-ml reads it again for each folder): a build
    context's upload and environment come first (the SDK resolves the environment before the inputs), then each
    input's upload, then the job."""
    model(tmp_path)
    (tmp_path / "docker-context").mkdir()
    (tmp_path / "docker-context" / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (tmp_path / "data.csv").write_text("x,y\n1,2\n")
    spec = job(
        tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}, "csv": {"path": "data.csv", "type": "file"}}
    )
    request = render(spec, environment=None, build={"path": "docker-context"})
    shape = [(c.method, c.url.split("?")[0].removeprefix(f"{ARM}{ARM_WS}")) for c in request.calls]
    model_hash, csv_hash = sdk_object_hash(tmp_path / "mlflow-model"), sdk_object_hash(tmp_path / "data.csv")
    assert shape[1:3] == [
        ("GET", "/datastores/workspaceblobstore"),
        ("POST", "/datastores/workspaceblobstore/listSecrets"),
    ]
    assert shape[3][1].endswith("/docker-context/")
    assert shape[4][1].startswith("/environments/")
    assert shape[5:] == [
        ("PUT", f"{STORE_CONTAINER}/LocalUpload/{model_hash}/mlflow-model/"),
        ("PUT", f"{STORE_CONTAINER}/LocalUpload/{csv_hash}/data.csv"),
        ("PUT", request.create.url.split("?")[0].removeprefix(f"{ARM}{ARM_WS}")),
    ]
    inputs = request.create.body["properties"]["inputs"]
    assert inputs["csv"] == {"uri": f"{URI}/{csv_hash}/data.csv", "jobInputType": "uri_file"}
    assert inputs["m"] == {"uri": f"{URI}/{model_hash}/mlflow-model", "jobInputType": "mlflow_model"}


def test_an_input_is_read_with_its_own_ignore_files_as_the_sdk_reads_it(tmp_path: Path) -> None:
    """The folder's own `.amlignore` (else its `.gitignore`) at its root, for the whole tree; not the
    repository's `.gitignore` (data is what it most often leaves out), not a nested one: the hash is the SDK's."""
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("mlflow-model/\n*.pkl\n")  # the repository keeps the model out of git
    folder = model(tmp_path)
    (folder / "artifacts" / ".gitignore").write_text("*.txt\n")  # nested: git reads it, the SDK does not
    first = render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}))
    assert upload_call(first).body["hash"] == sdk_object_hash(folder)
    assert len(upload_call(first).body["blobs"]) == 6  # every file, the nested .gitignore too

    (folder / ".gitignore").write_text("*.pkl\n")  # the folder's own .gitignore applies
    second = upload_call(render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}})))
    assert second.body["hash"] == sdk_object_hash(folder)
    assert not any(b["name"].endswith("model.pkl") for b in second.body["blobs"])

    (folder / ".amlignore").write_text("conda.yaml\n")  # and an .amlignore instead of it, as in the SDK
    third = upload_call(render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}})))
    assert third.body["hash"] == sdk_object_hash(folder)
    names = {b["name"].rsplit("/mlflow-model/", 1)[1] for b in third.body["blobs"]}
    assert "model.pkl" in names
    assert "conda.yaml" not in names

    (folder / ".crosstrainignore").write_text("artifacts/\n")  # crosstrain's own adds to it (the SDK's hash differs)
    fourth = upload_call(render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}})))
    assert not any("/artifacts/" in b["name"] for b in fourth.body["blobs"])


def test_the_job_file_is_never_uploaded(tmp_path: Path) -> None:
    """A job file in the input's folder is left out (editing another target's settings uploads nothing new);
    an input that is the job file is refused."""
    folder = model(tmp_path)
    spec = {
        "name": "inputs-job",
        "command": ["python", "-m", "train", "--model", "${inputs.m}"],
        "primary": {"machine": "Standard_DS3_v2"},
        "inputs": {"m": {"path": ".", "type": "mlflow_model"}},
        "targets": {"azureml": SETTINGS},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(spec))
    request = create_backend("azureml", environ={}).render(load_job(folder / "job.yaml"))
    assert not any(b["name"].endswith("/job.yaml") for b in upload_call(request).body["blobs"])
    assert request.inputs["m"].job_file == "job.yaml"
    (folder / "job.yaml").write_text(
        yaml.safe_dump(merge(spec, {"inputs": {"m": {"path": "job.yaml", "type": "file"}}}))
    )
    with pytest.raises(SpecError, match="is the job file") as caught:
        create_backend("azureml", environ={}).render(load_job(folder / "job.yaml"))
    assert caught.value.problems[0].path == "inputs.m.path"


# -- refusals: a path, a reason, a fix --------------------------------------------------------------------------
def refused(spec: TrainingJob, **settings: Any) -> list[Any]:
    with pytest.raises(SpecError) as caught:
        render(spec, **settings)
    problems = list(caught.value.problems)
    assert all(p.path and p.message and p.fix for p in problems), problems
    return problems


@pytest.mark.parametrize(
    ("location", "path", "says"),
    [
        ({"path": "missing"}, "inputs.m.path", "does not exist"),
        ({"path": "../elsewhere"}, "inputs.m.path", "outside the job file's folder"),
        ({"path": "mlflow-model/MLmodel"}, "inputs.m.path", "is a file, and the input's type is folder"),
        ({"path": "mlflow-model", "type": "file"}, "inputs.m.path", "is a folder, and the input's type is file"),
        ({"path": "mlflow-model", "type": "table"}, "inputs.m", "not as an mltable"),
    ],
)
def test_a_local_input_that_cannot_be_uploaded_is_refused(
    tmp_path: Path, location: dict[str, Any], path: str, says: str
) -> None:
    model(tmp_path)
    (problem,) = refused(job(tmp_path, {"m": location}))
    assert problem.path == path
    assert says in problem.message


def test_a_local_output_stays_refused(tmp_path: Path) -> None:
    (problem,) = refused(job(tmp_path, {"m": "azureml:cifar:1"}, outputs={"out": "./outputs"}))
    assert problem.path == "outputs.out"
    assert "writes outputs to a datastore" in problem.message


def test_outside_the_job_folder_only_when_the_job_says_so(tmp_path: Path) -> None:
    """As `code:`: a path out of the job file's folder (by `..` or a link) is refused unless the input says
    `outside_job_folder: true`, so a job file cannot upload ~/.aws unnoticed."""
    model(tmp_path)
    jobs = tmp_path / "jobs" / "basics"
    jobs.mkdir(parents=True)
    (problem,) = refused(job(jobs, {"m": {"path": "../../mlflow-model", "type": "mlflow_model"}}))
    assert problem.path == "inputs.m.path"
    assert "outside_job_folder: true" in problem.fix
    (jobs / "linked").symlink_to(tmp_path / "mlflow-model")
    (problem,) = refused(job(jobs, {"m": {"path": "linked", "type": "mlflow_model"}}))
    assert "is a link to" in problem.message
    said = {"path": "../../mlflow-model", "type": "mlflow_model", "outside_job_folder": True}
    request = render(job(jobs, {"m": said}))
    assert upload_call(request).body["hash"] == sdk_object_hash(tmp_path / "mlflow-model")
    with pytest.raises(SpecError, match="outside_job_folder is for a local path"):
        job(jobs, {"m": {"path": "azureml:cifar:1", "outside_job_folder": True}})


def test_a_link_out_of_the_input_and_an_input_too_large_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crosstrain import packaging
    from crosstrain.backends.azureml import plan

    folder = model(tmp_path)
    (folder / "secrets").symlink_to("/etc")
    (problem,) = refused(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}))
    assert problem.path == "inputs.m.path: secrets"
    assert "leaves the input" in problem.message
    (folder / "secrets").unlink()
    monkeypatch.setattr(plan, "_INPUT_LIMITS", packaging.Limits(max_bytes=64, description="at most 64 bytes here"))
    (problem,) = refused(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}))
    assert problem.path == "inputs.m.path"
    assert "at most 64 bytes here" in problem.message


def test_other_targets_still_refuse_a_local_input(tmp_path: Path) -> None:
    model(tmp_path)
    spec = job(tmp_path, {"m": "mlflow-model"}, image="us-docker.pkg.dev/p/r/train:1")
    with pytest.raises(SpecError) as caught:
        create_backend("vertex", environ={}).render(spec, {"project": "my-project", "region": "us-central1"})
    (problem,) = [p for p in caught.value.problems if p.path.startswith("inputs")]
    assert (problem.path, "cannot reach" in problem.message) == ("inputs.m", True)


# -- the az-yaml form -------------------------------------------------------------------------------------------
def test_az_yaml_names_the_local_path_and_loads_as_the_same_input(tmp_path: Path) -> None:
    """`az ml job create -f` uploads a local path to the same place (`LocalUpload/<object hash>/<name>`)."""
    from azure.ai.ml import load_job as sdk_load_job
    from azure.ai.ml.entities import Command

    folder = model(tmp_path)
    request = render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model", "mode": "download"}}))
    text = create_backend("azureml", environ={}).format(request, "az-yaml")
    assert yaml.safe_load(text)["inputs"] == {
        "m": {"type": "mlflow_model", "path": str(folder.resolve()), "mode": "download"}
    }
    loaded = sdk_load_job(source=io.StringIO(text))
    assert isinstance(loaded, Command)
    assert loaded._validate().passed
    assert (loaded.inputs["m"].type, loaded.inputs["m"].path) == ("mlflow_model", str(folder.resolve()))


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
    request: Request,
    inputs: dict[str, Any],
    service: AzureMLService,
    azurite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    where: Path,
) -> list[Any]:
    """What `MLClient.jobs.create_or_update(command(inputs=...))` sends for the job the request renders, its blob
    client sent to Azurite (the account host the blob store names)."""
    from azure.ai.ml import MLClient, PyTorchDistribution, command
    from azure.ai.ml._artifacts import _blob_storage_helper
    from azure.storage.blob import BlobServiceClient

    monkeypatch.setattr(
        _blob_storage_helper,
        "BlobServiceClient",
        functools.partial(BlobServiceClient, transport=LoopbackTransport(azurite_url)),
    )
    monkeypatch.chdir(where)  # outside a git repository: no git properties on the job
    transport = AzureMLTransport(service)
    ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=transport)
    ml.jobs.create_or_update(
        command(
            name=request.identity,
            display_name="inputs-job",
            experiment_name="inputs-job",
            properties={FINGERPRINT_PROPERTY: request.fingerprint},
            command=request.create.body["properties"]["command"],
            environment="azureml:my-env:3",
            compute="cpu-cluster",
            instance_count=1,
            distribution=PyTorchDistribution(process_count_per_instance=1),
            inputs=inputs,
        )
    )
    return list(transport.requests)


@pytest.mark.parametrize(
    ("kind", "path", "sdk_type"),
    [
        ("mlflow_model", "mlflow-model", "mlflow_model"),
        ("folder", "mlflow-model", "uri_folder"),
        ("file", "mlflow-model/MLmodel", "uri_file"),
    ],
)
def test_the_input_calls_and_blobs_are_the_sdks(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, path: str, sdk_type: str
) -> None:
    """azure-ai-ml's own `create_or_update(command(inputs={"m": Input(type=..., path=LOCAL)}))` against the fake
    workspace and Azurite makes the render's calls (the blob store's read and secret, then the job with the
    upload's URI) and uploads the blobs the render lists; crosstrain's submit then makes the same calls and
    blobs in a container of its own."""
    from azure.ai.ml import Input

    model(tmp_path)
    request = render(job(tmp_path, {"m": {"path": path, "type": kind}}))
    container = f"sdk-{kind}".replace("_", "-")
    service = AzureMLService(blob_endpoint=azurite_url, container=container)
    local = str((tmp_path / path).resolve())
    sent = sdk_submit(request, {"m": Input(type=sdk_type, path=local)}, service, azurite_url, monkeypatch, tmp_path)
    store, secrets = request.calls[1], request.calls[2]
    assert [(s.method, s.url, s.body) for s in sent] == [
        (store.method, store.url, store.body),
        (secrets.method, secrets.url, secrets.body),
        (request.create.method, request.create.url, request.create.body),
    ]
    upload = upload_call(request)
    sdk_blobs = {b.name: b.metadata for b in blob_container(azurite_url, container).list_blobs(include=["metadata"])}
    assert sorted(sdk_blobs) == [b["name"] for b in upload.body["blobs"]]
    indicator = upload.body["blobs"][0]["name"]
    assert sdk_blobs[indicator]["upload_status"] == "completed"  # its name and version: random UUIDs

    mine = AzureMLService(blob_endpoint=azurite_url, container=f"{container}-crosstrain")
    handle = backend(mine, azurite_url).send(request)
    assert [mine.operation(c) for c in mine.received] == ["find", "datastore", "datastore-secrets", "create"]
    ours = blob_container(azurite_url, mine.container)
    theirs = blob_container(azurite_url, container)
    assert {b.name: ours.download_blob(b.name).readall() for b in ours.list_blobs()} == {
        name: theirs.download_blob(name).readall() for name in sdk_blobs
    }
    metadata = ours.get_blob_client(indicator).get_blob_properties().metadata
    assert metadata == {"upload_status": "completed", "name": upload.body["hash"], "version": "1"}
    stored = mine.resources[mine.job(handle.job_id)]["properties"]["inputs"]["m"]
    assert stored == request.create.body["properties"]["inputs"]["m"]


def test_submit_uploads_an_input_once_and_reuses_the_sdks_upload(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.ai.ml import Input

    folder = model(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="inputs-once")
    ml = backend(service, azurite_url)
    inputs = {"m": {"path": "mlflow-model", "type": "mlflow_model"}}
    request = ml.render(job(tmp_path, inputs), SETTINGS)
    first = ml.send(request)
    container = blob_container(azurite_url, "inputs-once")
    prefix = upload_call(request).url.removeprefix(f"{STORE_CONTAINER}/")
    uploaded = {b.name.removeprefix(prefix): container.download_blob(b.name).readall() for b in container.list_blobs()}
    assert uploaded == {
        path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()
    }
    etags = {b.name: b.etag for b in container.list_blobs()}

    # the same folder for another run: its first blob says it was uploaded, so nothing is
    service.received.clear()
    second = ml.submit(job(tmp_path, inputs, run_id="again"), SETTINGS)
    assert second.job_id != first.job_id
    assert {b.name: b.etag for b in container.list_blobs()} == etags
    assert [service.operation(c) for c in service.received] == ["find", "datastore", "datastore-secrets", "create"]

    # the same request again: the job is adopted, nothing else is sent
    service.received.clear()
    assert ml.send(request).adopted
    assert [service.operation(c) for c in service.received] == ["find"]

    # a folder the SDK uploaded first is not uploaded again
    reused = AzureMLService(blob_endpoint=azurite_url, container="inputs-sdk-first")
    local = str(folder.resolve())
    sdk_submit(request, {"m": Input(type="mlflow_model", path=local)}, reused, azurite_url, monkeypatch, tmp_path)
    theirs = blob_container(azurite_url, "inputs-sdk-first")
    sdk_etags = {b.name: b.etag for b in theirs.list_blobs()}
    backend(reused, azurite_url).submit(job(tmp_path, inputs, run_id="after-the-sdk"), SETTINGS)
    assert {b.name: b.etag for b in theirs.list_blobs()} == sdk_etags


def test_an_input_changed_after_render_is_refused_before_anything_is_uploaded(azurite_url: str, tmp_path: Path) -> None:
    folder = model(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="inputs-changed")
    ml = backend(service, azurite_url)
    request = ml.render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}), SETTINGS)
    (folder / "conda.yaml").write_text("dependencies: [python=3.12]\n")
    with pytest.raises(SpecError, match="changed since the request was rendered") as caught:
        ml.send(request)
    assert caught.value.problems[0].path == "inputs.m.path"
    assert [service.operation(c) for c in service.received] == ["find"]
    assert not blob_container(azurite_url, "inputs-changed").exists()  # not even the container


def test_an_edited_request_uploads_nothing_else(azurite_url: str, tmp_path: Path) -> None:
    """An input's upload is held to the job it makes: a job PUT whose input URI names other content, and an
    upload whose folder the request does not name, are refused before anything is uploaded."""
    model(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="inputs-edited")
    ml = backend(service, azurite_url)
    request = ml.render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}), SETTINGS)
    props = request.create.body["properties"]
    other = {**props, "inputs": {"m": {**props["inputs"]["m"], "uri": f"{URI}/0000/mlflow-model"}}}
    edited = HttpCall("PUT", request.create.url, {"properties": other}, request.create.headers)
    with pytest.raises(SubmitError, match="input m calls do not name the content"):
        ml.send(dataclasses.replace(request, calls=(*request.calls[:-1], edited)))
    with pytest.raises(SpecError, match="uploads input m but names no file or folder"):
        ml.send(dataclasses.replace(request, inputs={}))
    assert [service.operation(c) for c in service.received] == ["find"]
    assert not blob_container(azurite_url, "inputs-edited").exists()


def test_a_build_context_and_inputs_share_one_read_of_the_store(azurite_url: str, tmp_path: Path) -> None:
    model(tmp_path)
    (tmp_path / "docker-context").mkdir()
    (tmp_path / "docker-context" / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (tmp_path / "data.csv").write_text("x,y\n1,2\n")
    service = AzureMLService(blob_endpoint=azurite_url, container="inputs-and-build")
    ml = backend(service, azurite_url)
    inputs = {"m": {"path": "mlflow-model", "type": "mlflow_model"}, "csv": {"path": "data.csv", "type": "file"}}
    handle = ml.submit(job(tmp_path, inputs), {**SETTINGS, "environment": None, "build": {"path": "docker-context"}})
    operations = [service.operation(c) for c in service.received]
    assert operations == ["find", "datastore", "datastore-secrets", "environment", "create"]
    names = {b.name.split("/", 2)[2] for b in blob_container(azurite_url, "inputs-and-build").list_blobs()}
    assert {"docker-context/Dockerfile", "data.csv", "mlflow-model/MLmodel"} <= names
    stored = service.resources[service.job(handle.job_id)]["properties"]["inputs"]
    assert stored["csv"]["uri"] == f"{URI}/{sdk_object_hash(tmp_path / 'data.csv')}/data.csv"


def test_the_folder_listed_at_submit_is_the_rendered_one(tmp_path: Path) -> None:
    """In a new process (no listing kept), submit lists the input again with the rules it was rendered with."""
    folder = model(tmp_path)
    (folder / ".amlignore").write_text("*.pkl\n")
    request = render(job(tmp_path, {"m": {"path": "mlflow-model", "type": "mlflow_model"}}))
    ref = request.inputs["m"]
    assert ref.ignore_files == INPUT_IGNORE_FILES
    folders._MADE_FOLDERS.clear()
    folders._FOLDERS.clear()
    again = folders.check_folder_unchanged(ref, field="inputs.m.path", noun="input", data=True)
    assert again.digest == ref.digest
    assert object_hash(again) == upload_call(request).body["hash"]
