"""A job's identity on one target depends on what that target sends, and on nothing else.

For every pair of backends: changing the second one's settings in the job file leaves the first one's identity
as it was, and changes the second one's own (each change below is sent in that target's request).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from crosstrain.loader import job_from_dict, load_job
from crosstrain.registry import create_backend
from crosstrain.testing.conformance import BASE_JOB, merge

SETTINGS: dict[str, dict[str, Any]] = {
    "vertex": {"project": "my-project", "region": "us-central1"},
    "aiplatform": {"project": "my-project", "region": "us-central1"},
    "azureml": {
        "subscription_id": "00000000-0000-0000-0000-000000000000",
        "resource_group": "my-rg",
        "workspace": "my-ws",
    },
    "databricks": {"host": "https://dbc-1234.cloud.databricks.com"},
    "fake": {"root": "/tmp/crosstrain-identity"},
    "local": {"workdir": "/tmp/crosstrain-identity"},
}
#: A change to each target's settings that reaches its request.
CHANGES: dict[str, dict[str, Any]] = {
    "vertex": {"region": "europe-west4"},
    "aiplatform": {"region": "europe-west4"},
    "azureml": {"workspace": "other-ws"},
    "databricks": {"host": "https://dbc-5678.cloud.databricks.com"},
    "fake": {"outcome": "failed"},
    "local": {"nodes": 1},
}
JOB = merge(BASE_JOB, {"targets": SETTINGS})


def identity(target: str, targets: dict[str, dict[str, Any]]) -> str:
    return create_backend(target, environ={}).render(job_from_dict({**JOB, "targets": targets})).identity


@pytest.mark.parametrize(("target", "changed"), list(itertools.permutations(SETTINGS, 2)))
def test_another_targets_settings_leave_the_identity_alone(target: str, changed: str) -> None:
    edited = {**SETTINGS, changed: {**SETTINGS[changed], **CHANGES[changed]}}
    assert identity(target, edited) == identity(target, SETTINGS)


@pytest.mark.parametrize("target", sorted(SETTINGS))
def test_the_targets_own_settings_change_its_identity(target: str) -> None:
    edited = {**SETTINGS, target: {**SETTINGS[target], **CHANGES[target]}}
    assert identity(target, edited) != identity(target, SETTINGS)


#: Settings that ship code on every target (Google's targets stage it in a bucket).
CODE_SETTINGS: dict[str, dict[str, Any]] = {
    **SETTINGS,
    "vertex": {**SETTINGS["vertex"], "staging_bucket": "gs://my-bucket/staging"},
    "aiplatform": {**SETTINGS["aiplatform"], "staging_bucket": "gs://my-bucket/staging"},
}


@pytest.mark.parametrize("target", sorted(CODE_SETTINGS))
def test_the_job_file_in_the_folder_it_ships_is_not_part_of_the_identity(target: str, tmp_path: Path) -> None:
    """The quickstart's layout, `code: .` beside job.yaml: editing another target's settings in the job file
    leaves this target's identity alone (the file is not shipped); editing the code moves it."""
    other = next(name for name in sorted(CODE_SETTINGS) if name != target)
    job_file, train = tmp_path / "job.yaml", tmp_path / "train.py"
    train.write_text("print('one')\n")

    def identity(targets: dict[str, dict[str, Any]]) -> str:
        job_file.write_text(json.dumps({**BASE_JOB, "code": ".", "targets": targets}))
        return create_backend(target, environ={}).render(load_job(job_file)).identity

    before = identity(CODE_SETTINGS)
    assert identity({**CODE_SETTINGS, other: {**CODE_SETTINGS[other], **CHANGES[other]}}) == before
    train.write_text("print('two')\n")
    assert identity(CODE_SETTINGS) != before
