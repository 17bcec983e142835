"""A render remembered per backend (`crosstrain.backends.memo`) is given again only while the job, what its
settings are resolved from and every file it read are what they were; otherwise it is made afresh, as it would
have been without the memo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crosstrain.backends.memo import digest
from crosstrain.loader import load_job
from crosstrain.registry import create_backend

JOB = """\
name: memo
environment: pytorch
code: .
command: python train.py
primary:
  machine: T4:1
targets:
  vertex: {project: my-project, region: us-central1, staging_bucket: gs://my-bucket/staging}
  databricks: {host: https://dbc-1234abcd-5678.cloud.databricks.com}
"""

AN_HOUR_AGO = 3600


def _settled(*paths: Path) -> None:
    """Files last changed an hour ago: a listing trusts no file changed within a second of it (racy)."""
    for path in paths:
        stamp = os.stat(path).st_mtime - AN_HOUR_AGO
        os.utime(path, (stamp, stamp))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / "train.py").write_text("print('hi')\n")
    _settled(tmp_path / "job.yaml", tmp_path / "train.py", tmp_path)
    return tmp_path


@pytest.mark.parametrize("target", ["vertex", "databricks"])
def test_an_unchanged_job_is_rendered_once(folder: Path, target: str) -> None:
    backend = create_backend(target, environ={})
    job = load_job(folder / "job.yaml")
    first = backend.render(job)
    assert backend.render(job) is first
    assert backend.render(load_job(folder / "job.yaml")) is first  # the same job, loaded again
    assert backend.is_rendered(first)


def test_a_changed_file_renders_afresh(folder: Path) -> None:
    backend = create_backend("vertex", environ={})
    job = load_job(folder / "job.yaml")
    first = backend.render(job)
    (folder / "train.py").write_text("print('bye')\n")
    _settled(folder / "train.py")
    second = backend.render(job)
    assert second is not first
    assert second == create_backend("vertex", environ={}).render(job)
    assert second.code is not None
    assert first.code is not None
    assert second.code.digest != first.code.digest
    (folder / "data.bin").write_bytes(b"x")  # a new file: the folder's stat moved
    assert backend.render(job).code != second.code


def test_what_settings_come_from_is_part_of_the_key(folder: Path) -> None:
    environ = {"GOOGLE_CLOUD_PROJECT": "other"}
    backend = create_backend("vertex", environ=environ)
    job = load_job(folder / "job.yaml")
    first = backend.render(job)
    assert backend.render(job, {"region": "europe-west4"}) != first
    assert backend.render(job) is first
    job_named = job.model_copy(
        update={"targets": {**job.targets, "vertex": {**job.targets["vertex"], "project": "p2"}}}
    )
    assert backend.render(job_named) != first
    environ["GOOGLE_CLOUD_PROJECT"] = "third"  # read by the settings, though the job file's project wins
    assert backend.render(job) == first


def test_a_request_edited_in_place_is_not_given_again(folder: Path) -> None:
    backend = create_backend("vertex", environ={})
    job = load_job(folder / "job.yaml")
    first = backend.render(job)
    was = digest(first)
    first.create.body["displayName"] = "edited"
    again = backend.render(job)
    assert again is not first
    assert digest(again) == was


def test_a_render_that_reads_a_file_as_it_is_is_not_remembered(folder: Path) -> None:
    (folder / "requirements.txt").write_text("numpy\n")
    (folder / "job.yaml").write_text(JOB + "requirements: {file: requirements.txt}\n")
    _settled(folder / "requirements.txt", folder / "job.yaml", folder)
    backend = create_backend("vertex", environ={})
    job = load_job(folder / "job.yaml")
    first = backend.render(job)
    (folder / "requirements.txt").write_text("numpy\nscipy\n")
    _settled(folder / "requirements.txt")
    second = backend.render(job)
    assert second is not first
    assert second != first
