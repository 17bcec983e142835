"""Azure ML code above `code_archive_above` files: crosstrain_code/ as it is and the user's files as one archive,
uploaded with the real azure-storage-blob to a real Azurite, and unpacked by the bootstrap once per node."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

from crosstrain import code_archive, packaging
from crosstrain.backends.azureml.settings import AML_IGNORE_FILES, SAS_CONTAINER
from crosstrain.loader import load_job
from crosstrain.registry import create_backend
from tests.backends.azureml_cloud import AzureMLService, blob_container
from tests.backends.test_azureml import (
    SETTINGS,
    _code_backend,
    _run_cli,
    body,
    code_folder,
    code_job,
    render,
    training_job_file,
)

#: What `code_folder` ships: .gitignore, train.py, pkg/__init__.py, pkg/model.py.
USER_FILES = {
    ".gitignore": b"data/\n*.pyc\n",
    "train.py": b"import pkg.model\nprint('trained')\n",
    "pkg/__init__.py": b"",
    "pkg/model.py": b"WIDTH = 4\n",
}
ARCHIVED = {**SETTINGS, "code_archive_above": 0}


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        inside = {m.name: tar.extractfile(m) for m in tar.getmembers() if m.isfile()}
        return {
            name.removeprefix(code_archive.INSIDE): read.read()
            for name, read in inside.items()
            if read is not None and name.startswith(code_archive.INSIDE)
        }


def test_the_threshold_decides_and_a_small_folder_renders_as_before(tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    default = render(code_job(folder))
    assert "code_archive_above" not in default.settings  # the default is not written: requests read as before
    assert all("/src/" in b["name"] or "src.tar.gz" not in b["name"] for b in default.calls[3].body["blobs"])
    at = render(code_job(folder), code_archive_above=len(USER_FILES))  # not above it: one blob per file
    assert at.calls[3].body == default.calls[3].body
    assert body(at)["codeId"] == body(default)["codeId"]
    above = render(code_job(folder), code_archive_above=len(USER_FILES) - 1)
    names = [b["name"].split("/", 1)[1] for b in above.calls[3].body["blobs"]]
    assert code_archive.ARCHIVE_PATH in names
    assert not [n for n in names if n.startswith(packaging.USER_PREFIX)]
    assert body(above)["codeId"].endswith("-archive/versions/1")
    assert body(above)["codeId"] != body(default)["codeId"]
    assert above.settings["code_archive_above"] == len(USER_FILES) - 1
    assert any(
        "4 files: sent as one archive (crosstrain_code/src.tar.gz), unpacked by the bootstrap on each node; set "
        "targets.azureml.code_archive_above to change" in note
        for note in above.notes
    )
    assert not any("one archive" in note for note in default.notes)
    assert render(code_job(folder), code_archive_above=len(USER_FILES) - 1).calls == above.calls  # deterministic


def test_an_archived_submit_uploads_the_runtime_and_one_archive_and_an_unchanged_one_nothing(
    azurite_url: str, tmp_path: Path
) -> None:
    folder = code_folder(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="archived")
    backend = _code_backend(service)
    first = backend.submit(code_job(folder), ARCHIVED)
    assert [service.operation(c) for c in service.received] == ["find", "code-list", "start-upload", "code", "create"]
    request = render(code_job(folder), code_archive_above=0)
    name = request.calls[3].url.removeprefix(SAS_CONTAINER + "/").rstrip("/")
    container = blob_container(azurite_url, "archived")
    listed = {b.name: b for b in container.list_blobs(include=["metadata"])}
    shipped = {k.removeprefix(f"{name}/") for k in listed}
    assert f"{packaging.PACKAGE}/__main__.py" in shipped
    assert f"{packaging.PACKAGE}/crosstrain/launch.py" in shipped
    assert not [k for k in shipped if k.startswith(packaging.USER_PREFIX)]  # no blob per user file
    assert shipped == {b["name"].removeprefix(f"{name}/") for b in request.calls[3].body["blobs"]}
    archive = container.download_blob(f"{name}/{code_archive.ARCHIVE_PATH}").readall()
    assert _members(archive) == USER_FILES
    assert [b.metadata for b in listed.values() if b.metadata] == [
        {"upload_status": "completed", "name": name, "version": "1"}
    ]
    code_id = body(request)["codeId"]
    assert service.resources[service.job(first.job_id)]["properties"]["codeId"] == code_id
    assert service.resources[code_id]["properties"]["codeUri"] == f"{azurite_url}/archived/{name}"
    etags = {k: b.etag for k, b in listed.items()}

    service.received.clear()  # unchanged content under a new run: found by its hash, nothing uploaded
    second = backend.submit(code_job(folder, run_id="again"), ARCHIVED)
    assert [service.operation(c) for c in service.received] == ["find", "code-list", "create"]
    assert {b.name: b.etag for b in container.list_blobs()} == etags
    assert service.resources[service.job(second.job_id)]["properties"]["codeId"] == code_id


PROCESSES = 4


def test_the_bootstrap_unpacks_the_archive_once_per_node_and_every_process_runs_from_it(tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    made = packaging.for_job(code_job(folder), ignore_files=AML_IGNORE_FILES)
    assert made is not None
    node = tmp_path / "node"  # the snapshot as Azure ML downloads it: the blobs of the code asset
    for file in code_archive.shipped(made, True):
        path = node / file.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.read())
    assert not (node / packaging.PACKAGE / "src").exists()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(temp)}
    command = ["python", "-c", "import os, pkg.model; print(pkg.model.WIDTH, sorted(os.listdir('.')))"]
    argv = [sys.executable, "-m", packaging.PACKAGE, "--", *command]
    started = [
        subprocess.Popen(argv, cwd=node, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    done = [
        (p.wait(timeout=120), p.stdout.read() if p.stdout else "", p.stderr.read() if p.stderr else "") for p in started
    ]
    assert [(code, out) for code, out, _ in done] == [(0, "4 ['.gitignore', 'pkg', 'train.py']\n")] * PROCESSES, done
    assert sum("crosstrain: unpacking " in err for _, _, err in done) == 1
    assert sorted(p.name for p in (node / packaging.PACKAGE).iterdir() if p.name.startswith(".")) == []  # no scratch
    again = subprocess.run(argv, cwd=node, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0
    assert "unpacking" not in again.stderr


def test_an_unsafe_archive_is_refused_by_the_bootstrap(tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    made = packaging.for_job(code_job(folder), ignore_files=AML_IGNORE_FILES)
    assert made is not None
    node = tmp_path / "node"
    for file in code_archive.shipped(made, True):
        path = node / file.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.read())
    with tarfile.open(node / code_archive.ARCHIVE_PATH, "w:gz") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(tmp_path)}
    argv = [sys.executable, "-m", packaging.PACKAGE, "--", "python", "-c", "print('ran')"]
    done = subprocess.run(argv, cwd=node, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "ran" not in done.stdout
    assert "cannot unpack the job's code" in done.stderr
    assert "holds '..'" in done.stderr
    assert not (tmp_path / "escaped.txt").exists()
    assert not (node / "escaped.txt").exists()


def test_an_archived_job_trains_under_emulation(tmp_path: Path, stock: Path) -> None:
    job_file = training_job_file(tmp_path, "code-archived", ARCHIVED)
    local = create_backend("local", environ={}).render(load_job(job_file), {"emulate": "azureml"})
    assert local.create.body["code_archived"] is True
    done = _run_cli("run", str(job_file), "--local", "--emulate", "azureml", "--set", f"python={stock}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    assert "crosstrain: unpacking" in done.stderr
    assert len(re.findall(r"rank (\d)/2 done", done.stderr)) == 2, done.stderr[-3000:]
