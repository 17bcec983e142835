"""Shipping `code:` on the Google targets (vertex, aiplatform; `crosstrain.backends._google`,
`crosstrain.adaptors.gcs`): the rendered upload and package specs, checked against Google's own types; the
upload with the real google-cloud-storage client against the real gcp-storage-emulator (first submit uploads
once, a re-submit uploads nothing, the uploaded archive unpacks to exactly the folder's files less the ignored
ones); and local runs of both forms from a stock Python (torch, no crosstrain).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
import yaml

from crosstrain.backends._google import fuse_bootstrap_args
from crosstrain.backends.aiplatform.backend import AIPlatformBackend
from crosstrain.backends.base import archive_bootstrap
from crosstrain.backends.vertex.backend import VertexBackend
from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import load_job
from crosstrain.packaging import ARCHIVE_NAME
from crosstrain.records import Request
from crosstrain.registry import create_backend
from crosstrain.spec import TrainingJob
from tests.backends.aiplatform_server import AIPlatformPlatform, loopback_session
from tests.backends.validators import assert_valid
from tests.backends.vertex_server import VertexPlatform
from tests.conftest import ROOT

BUCKET = "staging"
PREBUILT = "docker.pkg.dev/vertex-ai/training/"
TRAIN = ROOT / "examples" / "ddp-quickstart" / "train.py"
#: The user's files that ship (the rest of the folder is ignored by its .gitignore).
SHIPPED = {"train.py", "pkg/__init__.py", "pkg/util.py", ".gitignore"}
#: A two-node job that ships crosstrain runs under its launcher, which gives the command torchrun's variables.
LAUNCHER = ["python", "-m", "crosstrain.launch", "--nproc-per-node", "1", "--"]


def write_job(folder: Path, **changes: Any) -> Path:
    """A job file in `folder` with a code folder beside it: a trainer, a package, and files .gitignore leaves out."""
    code = folder / "code"
    (code / "pkg").mkdir(parents=True, exist_ok=True)
    (code / "data").mkdir(exist_ok=True)
    shutil.copy(TRAIN, code / "train.py")
    (code / "pkg" / "__init__.py").write_text("")
    (code / "pkg" / "util.py").write_text("SCALE = 2\n")
    (code / ".gitignore").write_text("data/\n*.ckpt\n")
    (code / "data" / "shard-0.bin").write_bytes(b"\0" * 1000)
    (code / "model.ckpt").write_bytes(b"weights")
    spec: dict[str, Any] = {
        "name": "ship-code",
        "code": "./code",
        "environment": "pytorch",
        "requirements": ["tqdm>=4"],
        "command": ["python", "train.py"],
        "args": ["--epochs", "1"],
        "env": {"NCCL_DEBUG": "WARN"},
        "primary": {"machine": "T4:1"},
        "workers": {"replicas": 1},
        "targets": {
            "vertex": {"project": "my-project", "staging_bucket": f"gs://{BUCKET}/runs"},
            "aiplatform": {"project": "my-project", "staging_bucket": f"gs://{BUCKET}"},
        },
    }
    for key, value in changes.items():
        if value is None:
            spec.pop(key, None)
        else:
            spec[key] = value
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def render(target: str, path: Path, **settings: Any) -> Request:
    return create_backend(target, environ={}).render(load_job(path), settings)


def problems_of(target: str, path: Path, **settings: Any) -> dict[str, str]:
    with pytest.raises(Unsupported) as refused:
        render(target, path, **settings)
    return {p.path: f"{p.message} | {p.fix}" for p in refused.value.problems}


# -- render: Vertex AI ---------------------------------------------------------------------------------------
def test_vertex_runs_the_package_on_the_prebuilt_container_after_uploading_it(tmp_path: Path) -> None:
    request = render("vertex", write_job(tmp_path))
    assert_valid(request)  # CustomJob.from_json (the protobuf types), the discovery document, required fields
    upload, _find, create = request.calls
    assert (upload.method, urlsplit(upload.url).path) == ("POST", f"/upload/storage/v1/b/{BUCKET}/o")
    name = parse_qs(urlsplit(upload.url).query)["name"][0]
    assert request.code is not None
    assert name == f"runs/crosstrain/code/{request.code.digest[:32]}/{ARCHIVE_NAME}"
    assert upload.body["archive"] == {
        "format": f"sdist {ARCHIVE_NAME}",
        "sha256": request.code.digest,
        "files": len(SHIPPED),
        "bytes": request.code.bytes,
    }
    assert "unless" in upload.purpose
    assert "already exists" in upload.purpose
    pools = create.body["jobSpec"]["workerPoolSpecs"]
    for pool in pools:
        assert "containerSpec" not in pool
        assert pool["pythonPackageSpec"] == {
            "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-5.py310:latest",
            "packageUris": [f"gs://{BUCKET}/{name}"],
            "pythonModule": "crosstrain_code",
            # two nodes: the launcher gives the command torchrun's variables (Vertex's RANK is a node's)
            "args": ["--", *LAUNCHER, "python", "train.py", "--epochs", "1"],
            "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
        }
    from google.cloud.aiplatform_v1 import CustomJob, PythonPackageSpec

    parsed = CustomJob.from_json(json.dumps(create.body))
    spec = parsed.job_spec.worker_pool_specs[0].python_package_spec
    assert isinstance(spec, PythonPackageSpec)
    assert spec.python_module == "crosstrain_code"
    assert list(spec.package_uris) == [f"gs://{BUCKET}/{name}"]


def test_the_package_moves_with_the_code_and_nothing_else(tmp_path: Path) -> None:
    path = write_job(tmp_path)
    first = render("vertex", path)
    assert render("vertex", path).to_json() == first.to_json()  # deterministic
    (tmp_path / "code" / "model.ckpt").write_bytes(b"other weights")  # ignored: same package, same job
    assert render("vertex", path).identity == first.identity
    (tmp_path / "code" / "pkg" / "util.py").write_text("SCALE = 3\n")
    moved = render("vertex", path)
    assert moved.calls[0].url != first.calls[0].url
    assert moved.identity != first.identity


@pytest.mark.parametrize(
    ("changes", "settings", "image"),
    [
        ({"primary": {"machine": "n1-standard-8"}}, {}, f"us-{PREBUILT}pytorch-cpu.2-4.py310:latest"),
        ({"environment": "pytorch:2.4"}, {"region": "europe-west4"}, f"europe-{PREBUILT}pytorch-gpu.2-4.py310:latest"),
        ({}, {"region": "asia-northeast1"}, f"asia-{PREBUILT}pytorch-gpu.2-5.py310:latest"),
        ({"environment": None}, {"environment": "r.example/executor:1"}, "r.example/executor:1"),
    ],
)  # fmt: skip
def test_the_executor_image_comes_from_the_table_or_the_setting(
    tmp_path: Path, changes: dict[str, Any], settings: dict[str, Any], image: str
) -> None:
    request = render("vertex", write_job(tmp_path, **changes), **settings)
    assert_valid(request)
    assert request.create.body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["executorImageUri"] == image


def test_vertex_on_your_own_image_unpacks_the_archive_from_the_fuse_mount(tmp_path: Path) -> None:
    request = render("vertex", write_job(tmp_path, environment=None, image="registry.example/train:1"))
    assert_valid(request)
    name = parse_qs(urlsplit(request.calls[0].url).query)["name"][0]
    pool = request.create.body["jobSpec"]["workerPoolSpecs"][0]
    container = pool["containerSpec"]
    assert container["imageUri"] == "registry.example/train:1"
    assert container["command"] == [
        "python3",
        "-c",
        archive_bootstrap(),
        f"/gcs/{BUCKET}/{name}",
        "--install",  # the requirements: pip-installed by the bootstrap, where no pre-built container does it
        "--",
        *LAUNCHER,
        "python",
        "train.py",
    ]
    assert container["args"] == ["--epochs", "1"]
    assert fuse_bootstrap_args(container["command"]) == ["--install", "--", *LAUNCHER, "python", "train.py"]
    assert any("FUSE" in note for note in request.notes)


def test_the_fuse_bootstrap_runs_the_command_from_the_unpacked_archive(tmp_path: Path, stock_python: Path) -> None:
    """What the container runs, with the archive where the FUSE mount shows it, on a Python without crosstrain."""
    from crosstrain import packaging

    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.py").write_text("import os, crosstrain; print('hi from', os.path.basename(os.getcwd()))\n")
    archive = tmp_path / ARCHIVE_NAME
    archive.write_bytes(packaging.bundle(code).archive())
    command = [str(stock_python), "-c", archive_bootstrap(), str(archive), "--", "python", "hello.py"]
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # crosstrain comes from the archive only
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=bare)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hi from src"


def test_the_launcher_runs_inside_the_package(tmp_path: Path) -> None:
    request = render("vertex", write_job(tmp_path, primary={"machine": "T4:2"}))
    args = request.create.body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["args"]
    assert args[:4] == ["--", "python", "-m", "crosstrain.launch"]
    assert args[-4:] == ["python", "train.py", "--epochs", "1"]


@pytest.mark.parametrize("target", ["vertex", "aiplatform"])
def test_what_a_google_target_cannot_ship_is_refused_with_the_fix(tmp_path: Path, target: str) -> None:
    no_bucket = problems_of(target, write_job(tmp_path, targets={target: {"project": "p"}}))
    assert "staging bucket" in no_bucket["code"]
    assert f"targets.{target}.staging_bucket" in no_bucket["code"]
    loose = problems_of(target, write_job(tmp_path, code=None, image="r.example/i:1", environment=None))
    assert "ships no code" in loose["requirements"]
    assert "set `code`" in loose["requirements"]
    missing = problems_of(target, write_job(tmp_path, code="./nowhere"))
    assert "does not exist" in missing["code"]
    unknown = problems_of(target, write_job(tmp_path, environment="pytorch:0.4"))
    assert "no managed GPU runtime for pytorch:0.4" in unknown["environment"]
    with pytest.raises(SpecError, match="gs://BUCKET"):
        render(target, write_job(tmp_path), staging_bucket="s3://nope")


def test_without_code_an_environment_is_the_container_image(tmp_path: Path) -> None:
    request = render("vertex", write_job(tmp_path, code=None, requirements=None))
    assert_valid(request)
    assert len(request.calls) == 2
    assert request.code is None
    container = request.create.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert container["imageUri"].endswith("pytorch-gpu.2-5.py310:latest")
    assert container["command"] == ["python", "train.py"]


@pytest.mark.parametrize("target", ["vertex", "aiplatform"])
def test_gcloud_format_says_the_package_is_uploaded_first(tmp_path: Path, target: str) -> None:
    backend = create_backend(target, environ={})
    request = backend.render(load_job(write_job(tmp_path)))
    text = backend.format(request, "gcloud")
    assert request.code is not None
    assert f"uploads the code package first (gcloud does not): gs://{BUCKET}/" in text
    assert "--config=" in text
    assert ("pythonPackageSpec" if target == "vertex" else "packageUris") in text


def test_settings_that_would_be_ignored_are_refused(tmp_path: Path) -> None:
    own = write_job(tmp_path, environment=None, image="r.example/i:1")
    vertex = problems_of("vertex", own, environment="r.example/executor:1")
    assert "every pool runs its own image" in vertex["targets.vertex.environment"]
    aip = problems_of("aiplatform", own, runtime_version="2.11")
    assert "names an image" in aip["targets.aiplatform.runtime_version"]
    loose = problems_of("aiplatform", write_job(tmp_path, code=None, requirements=None), runtime_version="2.11")
    assert "ships no code" in loose["targets.aiplatform.runtime_version"]


# -- render: AI Platform Training ------------------------------------------------------------------------------
def test_aiplatform_names_the_package_in_the_training_input(tmp_path: Path) -> None:
    request = render("aiplatform", write_job(tmp_path))
    assert_valid(request)  # the ml.v1 discovery document and the documented required fields
    upload, create = request.calls
    assert request.code is not None
    name = f"crosstrain/code/{request.code.digest[:32]}/{ARCHIVE_NAME}"
    assert parse_qs(urlsplit(upload.url).query)["name"] == [name]
    training = create.body["trainingInput"]
    assert training["packageUris"] == [f"gs://{BUCKET}/{name}"]
    assert training["pythonModule"] == "crosstrain_code"
    assert training["args"] == ["--", "env", "NCCL_DEBUG=WARN", *LAUNCHER, "python", "train.py", "--epochs", "1"]
    for config in ("masterConfig", "workerConfig"):
        assert training[config]["imageUri"] == "gcr.io/cloud-ml-public/training/pytorch-gpu.1-10"
        assert "containerCommand" not in training[config]
        assert "containerArgs" not in training[config]
    cpu = render("aiplatform", write_job(tmp_path, environment="pytorch:1.9", primary={"machine": "n1-standard-8"}))
    assert (
        cpu.create.body["trainingInput"]["masterConfig"]["imageUri"]
        == "gcr.io/cloud-ml-public/training/pytorch-cpu.1-9"
    )


def test_aiplatform_runs_a_package_on_a_runtime_version_or_your_image(tmp_path: Path) -> None:
    runtime = render("aiplatform", write_job(tmp_path, environment=None), runtime_version="2.11", python_version="3.7")
    assert_valid(runtime)
    training = runtime.create.body["trainingInput"]
    assert (training["runtimeVersion"], training["pythonVersion"]) == ("2.11", "3.7")
    assert "imageUri" not in training["masterConfig"]
    own = render("aiplatform", write_job(tmp_path, environment=None, image="gcr.io/p/train:1"))
    assert_valid(own)
    assert own.create.body["trainingInput"]["masterConfig"]["imageUri"] == "gcr.io/p/train:1"
    assert "runtimeVersion" not in own.create.body["trainingInput"]


def test_a_runtime_version_runs_the_bootstrap_on_python_3_7_never_its_default_python_2_7(tmp_path: Path) -> None:
    """Runtime versions up to 1.15 run Python 2.7 unless `pythonVersion` says otherwise, and the bootstrap every
    node starts (`python -m crosstrain_code`) cannot run there: 1.15 once rendered with no pythonVersion."""
    path = write_job(tmp_path, environment=None)
    for version in ("1.15", "2.11"):
        request = render("aiplatform", path, runtime_version=version)
        assert_valid(request)
        assert request.create.body["trainingInput"]["pythonVersion"] == "3.7"
        assert any("pythonVersion 3.7" in note for note in request.notes)


@pytest.mark.parametrize(
    ("settings", "path", "words"),
    [
        ({"runtime_version": "1.4"}, "targets.aiplatform.runtime_version", "runs Python 2.7 and 3.5"),
        ({"runtime_version": "1.2"}, "targets.aiplatform.runtime_version", "runs Python 2.7, and"),
        ({"runtime_version": "1.15", "python_version": "2.7"}, "targets.aiplatform.python_version", "needs Python 3.7"),
        ({"runtime_version": "2.11", "python_version": "3.5"}, "targets.aiplatform.python_version", "not 3.5"),
        ({"runtime_version": "latest"}, "targets.aiplatform.runtime_version", "not a runtime version"),
    ],
)
def test_a_runtime_version_without_a_python_the_bootstrap_runs_on_is_refused(
    tmp_path: Path, settings: dict[str, str], path: str, words: str
) -> None:
    found = problems_of("aiplatform", write_job(tmp_path, environment=None), **settings)
    assert list(found) == [path]
    assert words in found[path]


def test_aiplatform_refuses_pools_that_would_need_different_package_arguments(tmp_path: Path) -> None:
    found = problems_of("aiplatform", write_job(tmp_path, workers={"replicas": 1, "command": ["python", "other.py"]}))
    assert "one argument list" in found["command"]
    assert "--target vertex" in found["command"]


# -- send: the real google-cloud-storage client against the real gcp-storage-emulator --------------------------
class RecordingSession(requests.Session):
    """The storage client's own transport, with a record of what it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        method = method.decode() if isinstance(method, bytes) else method
        self.sent.append((method, str(url)))
        return super().request(method, url, *args, **kwargs)

    def uploads(self) -> list[str]:
        return [url for method, url in self.sent if "/upload/storage/v1/" in url and method in ("POST", "PUT")]


@pytest.fixture
def emulator() -> Iterator[str]:
    from gcp_storage_emulator.server import create_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def storage_factory(url: str, session: RecordingSession) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    def make(project: str) -> Any:
        return storage.Client(
            project=project,
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": url},
            _http=session,
        )

    return make


def unpacked(data: bytes) -> dict[str, bytes]:
    """The user's files in an uploaded sdist, by their path in the code folder."""
    prefix = "crosstrain_code-1.0/crosstrain_code/src/"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {
            m.name.removeprefix(prefix): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.name.startswith(prefix) and m.isfile()
        }


def local_files(code: Path) -> dict[str, bytes]:
    return {p.relative_to(code).as_posix(): p.read_bytes() for p in code.rglob("*") if p.is_file()}


def download(url: str, request: Request) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    bucket, name = urlsplit(request.calls[0].url).path.split("/")[-2], parse_qs(urlsplit(request.calls[0].url).query)
    anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
    client = storage.Client(project="p", credentials=anonymous, client_options={"api_endpoint": url})
    return client.bucket(bucket).get_blob(name["name"][0])


def test_vertex_uploads_once_and_a_resubmit_uploads_nothing(tmp_path: Path, emulator: str) -> None:
    path = write_job(tmp_path)
    with VertexPlatform() as vertex:
        session = RecordingSession()
        backend = VertexBackend(
            client_factory=vertex.client,
            storage_client=storage_factory(emulator, session),
            retry=vertex.retry_policy(),
            environ={},
        )
        request = backend.render(load_job(path), dict(vertex.settings))
        first = backend.send(request)
        assert len(session.uploads()) == 1
        blob = download(emulator, request)
        assert blob is not None
        assert request.code is not None
        assert blob.metadata == {"crosstrain-sha256": request.code.digest}
        generation = blob.generation
        created = [c for c in vertex.service.received if c.method == "POST"]
        assert len(created) == 1
        package = created[0].body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"]
        assert package == [f"gs://{blob.bucket.name}/{blob.name}"]
        # The archive unpacks to exactly the folder's files, less those .gitignore leaves out.
        files = unpacked(blob.download_as_bytes(checksum="md5"))
        expected = {k: v for k, v in local_files(tmp_path / "code").items() if k in SHIPPED}
        assert files == expected
        assert set(files) == SHIPPED

        again = VertexBackend(
            client_factory=vertex.client,
            storage_client=storage_factory(emulator, session),
            retry=vertex.retry_policy(),
            environ={},
        )
        second = again.send(again.render(load_job(path), dict(vertex.settings)))
        assert len(session.uploads()) == 1  # looked, found, sent nothing
        assert download(emulator, request).generation == generation
        assert (second.job_id, second.adopted) == (first.job_id, True)


def test_an_uploaded_archive_that_was_truncated_is_uploaded_again(tmp_path: Path, emulator: str) -> None:
    """Its name and metadata say which bundle; Cloud Storage keeps both when the object is cut short or
    replaced: the size and md5 are checked too, and a bad copy is uploaded again, not run."""
    path = write_job(tmp_path)
    with VertexPlatform() as vertex:
        session = RecordingSession()

        def backend() -> VertexBackend:
            return VertexBackend(
                client_factory=vertex.client,
                storage_client=storage_factory(emulator, session),
                retry=vertex.retry_policy(),
                environ={},
            )

        request = backend().render(load_job(path), dict(vertex.settings))
        assert request.code is not None
        backend().send(request)
        blob = download(emulator, request)
        whole = blob.download_as_bytes()
        blob.upload_from_string(whole[:100], content_type="application/gzip")  # the metadata stays
        assert download(emulator, request).metadata == {"crosstrain-sha256": request.code.digest}
        backend().send(request)
        assert len(session.uploads()) == 2
        assert download(emulator, request).download_as_bytes() == whole


def test_aiplatform_uploads_through_the_default_client_and_the_emulator_host(
    tmp_path: Path, emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)  # google-cloud-storage's own switch: anonymous, local
    path = write_job(tmp_path)
    with AIPlatformPlatform() as platform:
        request = platform.backend().render(load_job(path), dict(platform.settings))
        handle = platform.backend().send(request)
        blob = download(emulator, request)
        assert blob is not None
        assert blob.generation
        generation = blob.generation
        assert set(unpacked(blob.download_as_bytes())) == SHIPPED
        posted = [c for c in platform.service.received if c.method == "POST"]
        assert posted[0].body["trainingInput"]["packageUris"] == [f"gs://{blob.bucket.name}/{blob.name}"]
        again = platform.backend().send(platform.backend().render(load_job(path), dict(platform.settings)))
        assert download(emulator, request).generation == generation
        assert again.job_id == handle.job_id


def test_a_folder_changed_since_the_render_is_refused_before_anything_is_sent(tmp_path: Path, emulator: str) -> None:
    path = write_job(tmp_path)
    session = RecordingSession()
    backend = AIPlatformBackend(
        session=loopback_session(), storage_client=storage_factory(emulator, session), environ={}
    )
    request = backend.render(load_job(path), {"endpoint": "http://127.0.0.1:9"})
    (tmp_path / "code" / "train.py").write_text("print('edited')\n")
    with pytest.raises(SpecError, match="changed since the request was rendered"):
        backend.send(request)
    assert session.sent == []


def test_a_request_from_a_file_that_uploads_elsewhere_is_refused(tmp_path: Path) -> None:
    request = render("vertex", write_job(tmp_path))
    data = request.to_dict()
    data["calls"][0]["url"] = data["calls"][0]["url"].replace("crosstrain%2Fcode%2F", "crosstrain%2Fcode%2Fx")
    backend = create_backend("vertex", environ={})
    with pytest.raises(SpecError, match="does not upload this request's code"):
        backend.send(Request.from_dict(data))


# -- local: the package forms, from a stock Python ---------------------------------------------------------------
@pytest.mark.parametrize("emulate", ["vertex", "aiplatform"])
def test_a_package_job_trains_under_emulation_on_a_stock_python(
    tmp_path: Path, stock_python: Path, emulate: str
) -> None:
    path = write_job(tmp_path, primary={"machine": "n1-standard-4"})
    # crosstrain for the CLI only: the nodes inherit no PYTHONPATH, so their crosstrain is the archive's.
    cli = f"import sys; sys.path.insert(0, {str(ROOT / 'src')!r}); from crosstrain.cli import main; sys.exit(main())"
    command = [sys.executable, "-c", cli, "run", str(path), "--local", "--emulate", emulate]
    command += ["--set", f"python={stock_python}", "--set", "nproc_per_node=1"]
    bare = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path, env=bare)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    assert "rank 1/2 done" in done.stderr  # a local run writes the ranks' output to stderr


def test_the_local_plan_runs_the_package_module_from_the_stage_root(tmp_path: Path) -> None:
    job: TrainingJob = load_job(write_job(tmp_path))
    request = create_backend("local", environ={}).render(job, {"emulate": "vertex", "nproc_per_node": 1})
    argv = [p["argv"] for p in request.create.body["processes"]]
    assert argv[0] == ["python", "-m", "crosstrain_code", "--", *LAUNCHER, "python", "train.py", "--epochs", "1"]
    own = load_job(write_job(tmp_path, environment=None, image="registry.example/t:1"))
    fused = create_backend("local", environ={}).render(own, {"emulate": "vertex", "nproc_per_node": 1})
    # The FUSE form runs from the unpacked archive here, and never pip-installs into the caller's environment.
    assert fused.create.body["processes"][0]["argv"][:5] == ["python", "-m", "crosstrain_code", "--", "python"]


# -- the examples ------------------------------------------------------------------------------------------------
PACKAGE_EXAMPLES = {
    "aiplatform-prebuilt-package": ("aiplatform", "vertex"),
    "vertex-package-reduction-server": ("vertex",),
}


def crosstrain(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        check=False,
    )


@pytest.mark.parametrize("name", PACKAGE_EXAMPLES)
def test_a_package_example_renders_the_same_from_any_folder(name: str, tmp_path: Path) -> None:
    folder = ROOT / "examples" / name
    for target in PACKAGE_EXAMPLES[name]:
        outputs = {
            crosstrain("render", str(path), "-t", target, cwd=cwd).stdout
            for path, cwd in (
                (folder.relative_to(ROOT) / "job.yaml", ROOT),
                (Path("job.yaml"), folder),
                (folder / "job.yaml", tmp_path),
            )
        }
        assert len(outputs) == 1
        request = Request.from_dict(json.loads(outputs.pop()))
        assert request.code is not None
        assert request.code.folder == str(folder / "src")


@pytest.mark.parametrize(("name", "emulate"), [(n, e) for n, targets in PACKAGE_EXAMPLES.items() for e in targets])
def test_a_package_example_runs_under_emulation(name: str, emulate: str, tmp_path: Path) -> None:
    done = crosstrain("run", str(ROOT / "examples" / name / "job.yaml"), "--local", "--emulate", emulate, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    if name == "vertex-package-reduction-server":
        assert "reduction server is not emulated" in done.stderr
        assert "under torch.distributed.run" in done.stdout + done.stderr  # the launcher, from the package


def _returns_scores() -> dict[str, float]:
    return {"accuracy": 0.5}


def test_a_function_jobs_result_comes_back_from_cloud_storage(emulator: str) -> None:
    """rank 0 writes the result through the FUSE mount under output_dir; once the job has succeeded, the handle
    reads it from the bucket (the storage emulator here), and says so when the job left none."""
    import cloudpickle
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from crosstrain import api
    from crosstrain.errors import JobFailed

    job = api.with_function(
        _returns_scores, {"name": "fn", "image": "img:1", "primary": {"machine": "n1-standard-8"}}
    ).model_copy(update={"output_dir": f"gs://{BUCKET}/runs"})
    with VertexPlatform() as vertex:
        backend = VertexBackend(
            client_factory=vertex.client,
            storage_client=storage_factory(emulator, RecordingSession()),
            retry=vertex.retry_policy(),
            environ={},
        )
        request = backend.render(job, {**vertex.settings, "staging_bucket": f"gs://{BUCKET}/stage"})
        assert Request.from_dict(json.loads(request.to_json())) == request
        env = request.create.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["env"]
        assert {"name": "CROSSTRAIN_RESULT_DIR", "value": f"/gcs/{BUCKET}/runs/crosstrain-result"} in env
        handle = backend.send(request).of(request)
        assert handle.result_at == f"gs://{BUCKET}/runs/crosstrain-result/result.pkl"
        with pytest.raises(JobFailed, match="left no result"):
            handle.result()
        anonymous = AnonymousCredentials()  # type: ignore[no-untyped-call]
        client = storage.Client(project="p", credentials=anonymous, client_options={"api_endpoint": emulator})
        client.bucket(BUCKET).blob("runs/crosstrain-result/result.pkl").upload_from_string(
            cloudpickle.dumps({"accuracy": 0.5})
        )
        assert handle.result() == {"accuracy": 0.5}
