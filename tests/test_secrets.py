"""Secrets stay references: the `{secret: REF}` form, what each target renders for it (checked against the
platform's own schema or SDK), and what it refuses, with the field path and the fix."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import job_from_dict
from crosstrain.records import Request
from crosstrain.registry import create_backend
from crosstrain.secrets import EXAMPLE_REFERENCES
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.discovery import assert_conforms

DATABRICKS, GCP, AZURE = (EXAMPLE_REFERENCES[s] for s in ("databricks", "gcp", "azure"))
SETTINGS: dict[str, dict[str, Any]] = {
    "databricks": {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"},
    "vertex": {"project": "my-proj", "region": "us-central1"},
    "aiplatform": {"project": "my-proj", "region": "us-central1"},
    "azureml": {"subscription_id": "s", "resource_group": "rg", "workspace": "ws", "compute": "gpu"},
    "fake": {},
}


def render(target: str, env: dict[str, Any], changes: dict[str, Any] | None = None) -> Request:
    job = job_from_dict(merge(merge(BASE_JOB, {"env": env}), changes or {}))
    return create_backend(target, environ={}).render(job, SETTINGS[target])


# -- the form ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reference", "store"),
    [
        ("ml-scope/hf-token", "databricks"),
        ("projects/my-proj/secrets/hf-token", "gcp"),
        ("projects/123456789/secrets/hf_token/versions/3", "gcp"),
        ("projects/my-proj/secrets/hf-token/versions/latest", "gcp"),
        ("https://my-vault.vault.azure.net/secrets/hf-token", "azure"),
        ("https://my-vault.vault.azure.cn/secrets/hf-token/0123456789abcdef0123456789abcdef", "azure"),
    ],
)
def test_each_store_has_its_own_form(reference: str, store: str) -> None:
    job = job_from_dict({"name": "j", "env": {"TOKEN": {"secret": reference}, "PLAIN": "x"}})
    (pool,) = job.pools()
    assert pool.env == {"PLAIN": "x"}, "a secret is never a plain value"
    ref, path = pool.secrets["TOKEN"]
    assert (ref.secret, ref.store, path) == (reference, store, "env.TOKEN")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"secret": "just-a-name"}, "is not a secret reference"),
        ({"secret": "a/b/c"}, "is not a secret reference"),
        ({"secret": "http://my-vault.vault.azure.net/secrets/x"}, "is not a secret reference"),
        ({"secret": "https://evil.example.com/secrets/x"}, "is not a secret reference"),
        ({"secret": "projects/p/secrets/s/versions/0"}, "is not a secret reference"),
        ({"secret": "s/k", "value": "x"}, "whose one key is `secret`"),
        ({"value": "x"}, "whose one key is `secret`"),
        (5, "is not a string"),
        (["a"], "not a list"),
    ],
)
def test_a_bad_value_is_refused_at_its_path_with_the_fix(value: Any, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        job_from_dict({"name": "j", "workers": {"replicas": 1, "env": {"TOKEN": value}}})
    (problem,) = refused.value.problems
    # A bad reference is named down to its field; any other bad value at the variable.
    assert problem.path == "workers.env.TOKEN" + (".secret" if "reference" in words else "")
    assert words in problem.message
    assert problem.fix


def test_the_path_names_the_field_that_set_the_secret() -> None:
    job = job_from_dict(
        {
            "name": "j",
            "env": {"A": {"secret": GCP}},
            "primary": {"env": {"B": {"secret": GCP}}},
            "workers": {"replicas": 1, "env": {"C": {"secret": GCP}, "A": "plain now"}},
        }
    )
    primary, workers = job.pools()
    assert {k: path for k, (_, path) in primary.secrets.items()} == {"A": "env.A", "B": "primary.env.B"}
    assert {k: path for k, (_, path) in workers.secrets.items()} == {"B": "primary.env.B", "C": "workers.env.C"}
    assert workers.env["A"] == "plain now"


# -- what each target renders ------------------------------------------------------------------------------
def test_databricks_renders_the_cluster_placeholder() -> None:
    from databricks.sdk.service import jobs

    request = render("databricks", {"HF_TOKEN": {"secret": DATABRICKS}}, {"primary": {"machine": "A10G:4"}})
    task = request.create.body["tasks"][0]
    assert task["new_cluster"]["spark_env_vars"]["HF_TOKEN"] == "{{secrets/ml-scope/hf-token}}"
    assert task["new_cluster"]["spark_env_vars"]["NCCL_DEBUG"] == "INFO"
    assert jobs.SubmitTask.from_dict(task).as_dict() == task


def _vertex_container(request: Request, index: int = 0) -> dict[str, Any]:
    container: dict[str, Any] = request.create.body["jobSpec"]["workerPoolSpecs"][index]["containerSpec"]
    return container


def test_vertex_passes_the_reference_and_runs_the_command_under_the_resolver() -> None:
    from google.cloud.aiplatform_v1.types import CustomJob

    request = render("vertex", {"HF_TOKEN": {"secret": GCP}}, {"launch": {"mode": "per-node"}})
    for index in (0, 1):  # the primary and the workers
        container = _vertex_container(request, index)
        assert {"name": "CROSSTRAIN_SECRET_HF_TOKEN", "value": GCP} in container["env"]
        assert "HF_TOKEN" not in {item["name"] for item in container["env"]}
        resolver, launcher = container["command"][:4], container["command"][4:]
        assert resolver == ["python", "-m", "crosstrain.runtime.secrets", "--"]
        assert launcher[:3] == ["python", "-m", "crosstrain.launch"], "the resolver runs once per node, outside"
        assert container["command"][-3:] == ["python", "-m", "train"]
    assert any("secretmanager.secretAccessor" in note and "crosstrain[secrets]" in note for note in request.notes)
    CustomJob.from_json(json.dumps(request.create.body))
    assert_conforms("aiplatform.v1", "GoogleCloudAiplatformV1CustomJob", request.create.body)


def test_vertex_needs_a_command_to_resolve_at_start() -> None:
    with pytest.raises(Unsupported) as refused:
        render("vertex", {"HF_TOKEN": {"secret": GCP}}, {"command": None, "launch": {"mode": "per-process"}})
    problem = next(p for p in refused.value.problems if "image's entrypoint" in p.message)
    assert problem.path == "env.HF_TOKEN"
    assert "set `command`" in problem.fix


def test_aiplatform_passes_the_reference_through_env() -> None:
    request = render("aiplatform", {"HF_TOKEN": {"secret": GCP}})
    command = request.create.body["trainingInput"]["masterConfig"]["containerCommand"]
    assert command[0] == "env"
    assert f"CROSSTRAIN_SECRET_HF_TOKEN={GCP}" in command
    assert command[command.index("crosstrain.runtime.secrets") - 2 :][:4] == [
        "python",
        "-m",
        "crosstrain.runtime.secrets",
        "--",
    ]
    assert_conforms("ml.v1", "GoogleCloudMlV1__Job", request.create.body)


def test_azureml_passes_the_reference_and_the_sdk_accepts_the_job(tmp_path: Path) -> None:
    from azure.ai.ml import load_job as sdk_load_job

    request = render("azureml", {"WANDB_API_KEY": {"secret": AZURE}})
    props = request.create.body["properties"]
    assert props["environmentVariables"]["CROSSTRAIN_SECRET_WANDB_API_KEY"] == AZURE
    assert "WANDB_API_KEY" not in props["environmentVariables"]
    assert shlex.split(props["command"])[:4] == ["python", "-m", "crosstrain.runtime.secrets", "--"]
    printed = tmp_path / "job.yml"
    printed.write_text(create_backend("azureml", environ={}).format(request, "az-yaml"))
    from azure.ai.ml.entities import Command

    loaded = sdk_load_job(source=printed)
    assert isinstance(loaded, Command)
    assert loaded._validate().passed
    assert yaml.safe_load(printed.read_text())["environment_variables"]["CROSSTRAIN_SECRET_WANDB_API_KEY"] == AZURE


def test_the_fake_keeps_every_reference() -> None:
    env = {"A": {"secret": DATABRICKS}, "B": {"secret": GCP}, "C": {"secret": AZURE}}
    pool = render("fake", env).create.body["pools"][0]
    assert pool["secrets"] == {"A": DATABRICKS, "B": GCP, "C": AZURE}
    assert set(pool["env"]) == {"NCCL_DEBUG"}


def test_local_takes_the_value_from_the_callers_environment_and_never_shows_it(tmp_path: Path) -> None:
    job = job_from_dict(
        merge(BASE_JOB, {"env": {"HF_TOKEN": {"secret": GCP}}, "primary": {"machine": None}, "workers": None})
    )
    local = create_backend("local", environ={"HF_TOKEN": "s3cr3t-value"})
    request = local.render(job, {"workdir": str(tmp_path)})
    text = request.to_json()
    assert "s3cr3t-value" not in text
    assert GCP in text, "the dry run shows the reference"
    for process in request.create.body["processes"]:
        assert "HF_TOKEN" not in process["env"], "the process inherits it from the caller"
    with pytest.raises(Unsupported) as refused:
        create_backend("local", environ={}).render(job, {"workdir": str(tmp_path)})
    (problem,) = refused.value.problems
    assert problem.path == "env.HF_TOKEN"
    assert "where HF_TOKEN is not set" in problem.message
    assert problem.fix == "export HF_TOKEN=... before running"


@pytest.mark.parametrize(
    ("target", "reference", "resolves"),
    [
        ("databricks", GCP, "Databricks secret scope"),
        ("databricks", AZURE, "Databricks secret scope"),
        ("vertex", DATABRICKS, "Google Secret Manager"),
        ("vertex", AZURE, "Google Secret Manager"),
        ("aiplatform", AZURE, "Google Secret Manager"),
        ("azureml", GCP, "Azure Key Vault"),
        ("azureml", DATABRICKS, "Azure Key Vault"),
    ],
)
def test_a_store_the_target_cannot_read_is_refused_with_the_path_and_the_fix(
    target: str, reference: str, resolves: str
) -> None:
    changes = {"primary": {"machine": "A10G:4"}} if target == "databricks" else {}
    with pytest.raises(Unsupported) as refused:
        render(target, {"HF_TOKEN": {"secret": reference}}, changes)
    (problem,) = [p for p in refused.value.problems if p.path == "env.HF_TOKEN"]
    assert f"{target} cannot resolve" in problem.message
    assert reference in problem.message
    assert resolves in problem.fix


def test_a_worker_only_secret_is_refused_once_at_its_own_path() -> None:
    with pytest.raises(Unsupported) as refused:
        render("azureml", {}, {"workers": {"env": {"TOKEN": {"secret": GCP}}}})
    paths = [p.path for p in refused.value.problems]
    assert paths.count("workers.env.TOKEN") == 1


def test_the_reference_variables_are_reserved() -> None:
    with pytest.raises(Unsupported) as refused:
        render("vertex", {"CROSSTRAIN_SECRET_X": "projects/p/secrets/s"})
    (problem,) = [p for p in refused.value.problems if p.path == "env.CROSSTRAIN_SECRET_X"]
    assert "X: {secret: REF}" in problem.fix
