"""`crosstrain schema`: a JSON Schema that validates every example and catches what the spec refuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from crosstrain.schema import job_schema
from tests.conftest import EXAMPLES, ROOT


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = job_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_there_are_examples() -> None:
    assert EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_validates(validator: jsonschema.Draft202012Validator, example: Path) -> None:
    validator.validate(yaml.safe_load(example.read_text()))


@pytest.mark.parametrize(
    "bad",
    [
        {"name": "j", "nope": 1},
        {"name": "j", "workers": {"replicas": -1}},
        {"name": "j", "primary": {"machine": {"accelerator": {"count": 2}}}},
        {"name": "j", "launch": {"mode": "sometimes"}},
        {"name": "j", "targets": {"fake": {"no_such_setting": 1}}},
        {"workers": {"replicas": 1}},
    ],
)
def test_schema_rejects_bad_files(validator: jsonschema.Draft202012Validator, bad: dict[str, Any]) -> None:
    assert list(validator.iter_errors(bad))


def test_schema_accepts_the_shorthands(validator: jsonschema.Draft202012Validator) -> None:
    validator.validate(
        {
            "name": "j",
            "command": "python x.py",
            "primary": {"machine": "A100:8"},
            "scheduling": {"timeout": "24h"},
            "reduction_server": {"replicas": "auto"},
        }
    )


def test_schema_documents_target_settings_and_their_env_vars() -> None:
    fake = job_schema()["properties"]["targets"]["properties"]["fake"]
    assert "root" in fake["properties"]
    assert fake["properties"]["root"]["env"] == ["CROSSTRAIN_FAKE_ROOT"]


def test_cli_prints_it_and_the_committed_copy_is_current() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", "schema"], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(done.stdout) == job_schema()
    assert json.loads((ROOT / "docs" / "job.schema.json").read_text()) == job_schema()
