"""`targets.<target>.patch`: RFC 7396 on the create call's body, checked at render against the schema derived
from each platform's SDK, and the patched render still valid by the platform's own check (`validators`)."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict
from crosstrain.patch import merge
from crosstrain.records import Request
from crosstrain.registry import create_backend
from crosstrain.testing.conformance import BASE_JOB
from crosstrain.testing.conformance import merge as deep_merge
from tests.backends.azureml_cloud import WORKSPACE
from tests.backends.validators import assert_valid
from tests.conftest import ROOT

SETTINGS: dict[str, dict[str, Any]] = {
    "vertex": {"project": "my-project", "region": "us-central1"},
    "aiplatform": {"project": "my-project", "region": "us-central1"},
    "azureml": {**WORKSPACE, "compute": "gpu-cluster"},
    "databricks": {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"},
}


@pytest.fixture(autouse=True)
def _quiet_sdk() -> Iterator[None]:
    """azure-ai-ml logs "experimental class" notices when the validators load it."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def render(target: str, patch: Any, **job: Any) -> Request:
    spec = job_from_dict(deep_merge(BASE_JOB, {**job, "targets": {target: {"patch": patch}}}))
    return create_backend(target, environ={}).render(spec, SETTINGS[target])


def refused(target: str, patch: Any) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        render(target, patch)
    assert all(p.fix for p in caught.value.problems)
    return [(p.path, f"{p.message} / fix: {p.fix}") for p in caught.value.problems]


def test_merge_is_rfc_7396() -> None:
    """The examples of RFC 7396, appendix A, plus crosstrain's positions on a list."""
    cases = [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        (["a", "b"], ["c", "d"], ["c", "d"]),
        ({"a": "b"}, ["c"], ["c"]),
        ({"a": "foo"}, None, None),
        ({"a": "foo"}, "bar", "bar"),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        ({"l": [{"x": 1}, {"y": 2}]}, {"l": {"1": {"y": 3, "z": 4}}}, {"l": [{"x": 1}, {"y": 3, "z": 4}]}),
    ]
    for target, patch, result in cases:
        before = repr(target)
        assert merge(target, patch) == result, (target, patch)
        assert repr(target) == before  # the rendered body is not changed in place


# -- a useful patch renders, and the platform's own check takes it -------------------------------------------
USEFUL: dict[str, tuple[dict[str, Any], Any]] = {
    "vertex": (
        {
            "jobSpec": {
                "enableWebAccess": True,
                "persistentResourceId": "my-ray-cluster",
                "workerPoolSpecs": {"1": {"diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": 200}}},
            }
        },
        lambda body: (body["jobSpec"]["enableWebAccess"], body["jobSpec"]["workerPoolSpecs"][1]["diskSpec"]),
    ),
    "aiplatform": (
        {"trainingInput": {"enableWebAccess": True, "useChiefInTfConfig": True}},
        lambda body: (body["trainingInput"]["enableWebAccess"], body["trainingInput"]["useChiefInTfConfig"]),
    ),
    "azureml": (
        {
            "properties": {
                "description": "nightly pretraining",
                "properties": {"owner": "nlp"},
                "services": {
                    "notebook": {"jobServiceType": "JupyterLab", "nodes": {"nodesValueType": "All"}},
                    "board": {"jobServiceType": "TensorBoard", "properties": {"logDir": "outputs/tb"}},
                },
            }
        },
        lambda body: (body["properties"]["description"], sorted(body["properties"]["services"])),
    ),
    "databricks": (
        {
            "tasks": {
                "0": {
                    "new_cluster": {
                        "policy_id": "ABC123",
                        "init_scripts": [{"volumes": {"destination": "/Volumes/main/ops/scripts/init.sh"}}],
                    }
                }
            }
        },
        lambda body: (body["tasks"][0]["new_cluster"]["policy_id"], body["tasks"][0]["new_cluster"]["init_scripts"]),
    ),
}


@pytest.mark.parametrize("target", sorted(USEFUL))
def test_a_useful_patch_renders_validly_and_moves_the_fingerprint(target: str) -> None:
    patch, read = USEFUL[target]
    plain = create_backend(target, environ={}).render(job_from_dict(BASE_JOB), SETTINGS[target])
    request = render(target, patch)
    assert_valid(request)
    assert all(read(request.create.body))
    assert request.fingerprint != plain.fingerprint  # the patch is part of what is asked for
    assert request.identity != plain.identity
    assert any("patch" in note for note in request.notes)
    assert "patch" not in request.settings  # in the body, not repeated in the settings
    assert render(target, patch) == request  # deterministic


def test_azure_services_and_description_reach_the_cli_yaml() -> None:
    import yaml

    request = render("azureml", USEFUL["azureml"][0])
    cli = yaml.safe_load(create_backend("azureml", environ={}).format(request, "az-yaml"))
    assert cli["description"] == "nightly pretraining"
    assert cli["services"] == {
        "notebook": {"type": "jupyter_lab", "nodes": "all"},
        "board": {"type": "tensor_board", "log_dir": "outputs/tb"},
    }


# -- a typo is an error at its path, before anything is sent -------------------------------------------------
@pytest.mark.parametrize(
    ("target", "patch", "path", "message"),
    [
        (
            "vertex",
            {"jobSpec": {"enableWebAcess": True}},
            "targets.vertex.patch.jobSpec.enableWebAcess",
            "enableWebAccess",
        ),
        (
            "vertex",
            {"jobSpec": {"enableWebAccess": "yes"}},
            "targets.vertex.patch.jobSpec.enableWebAccess",
            "true or false",
        ),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": {"0": {"machineSpec": {"acceleratorType": "NVIDIA_TESLA_A10O"}}}}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
            "NVIDIA_TESLA_A100",
        ),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": {"7": {}}}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs",
            "names no element",
        ),
        (
            "vertex",
            {"jobSpec": {"scheduling": {"timeout": "1h"}}},
            "targets.vertex.patch.jobSpec.scheduling.timeout",
            "3600s",
        ),
        ("vertex", {"state": "JOB_STATE_SUCCEEDED"}, "targets.vertex.patch.state", "output only"),
        ("vertex", ["not", "a", "mapping"], "targets.vertex.patch", "mapping"),
        (
            "aiplatform",
            {"trainingInput": {"scaleTeir": "BASIC"}},
            "targets.aiplatform.patch.trainingInput.scaleTeir",
            "scaleTier",
        ),
        (
            "aiplatform",
            {"trainingInput": {"scaleTier": "BASIK"}},
            "targets.aiplatform.patch.trainingInput.scaleTier",
            "BASIC",
        ),
        (
            "aiplatform",
            {"trainingInput": {"workerCount": 3}},
            "targets.aiplatform.patch.trainingInput.workerCount",
            '"4"',
        ),
        ("azureml", {"properties": {"servces": {}}}, "targets.azureml.patch.properties.servces", "services"),
        (
            "azureml",
            {"properties": {"distribution": {"distributionType": "Horovod"}}},
            "targets.azureml.patch.properties.distribution.distributionType",
            "Horovod",
        ),
        (
            "azureml",
            {"properties": {"limits": {"timeout": "2h"}}},
            "targets.azureml.patch.properties.limits.timeout",
            "PT1H",
        ),
        (
            "databricks",
            {"tasks": {"0": {"new_cluster": {"polcy_id": "x"}}}},
            "targets.databricks.patch.tasks[0].new_cluster.polcy_id",
            "policy_id",
        ),
        ("databricks", {"timeout_seconds": "1h"}, "targets.databricks.patch.timeout_seconds", "whole number"),
    ],
)
def test_a_bad_patch_is_refused_at_its_path(target: str, patch: Any, path: str, message: str) -> None:
    problems = refused(target, patch)
    assert any(p == path and message in text for p, text in problems), problems


def test_a_typo_is_refused_before_anything_is_sent() -> None:
    spec = job_from_dict({**BASE_JOB, "targets": {"vertex": {"patch": {"jobSpec": {"enableWebAcess": True}}}}})
    backend = create_backend("vertex", environ={}, client_factory=lambda endpoint: pytest.fail("a client was made"))
    with pytest.raises(SpecError, match="did you mean 'enableWebAccess'"):
        backend.submit(spec, SETTINGS["vertex"])


# -- null removes ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "patch", "gone"),
    [
        ("vertex", {"jobSpec": {"scheduling": None}}, lambda body: "scheduling" in body["jobSpec"]),
        ("aiplatform", {"trainingInput": {"scheduling": None}}, lambda body: "scheduling" in body["trainingInput"]),
        ("azureml", {"properties": {"limits": None}}, lambda body: "limits" in body["properties"]),
        ("databricks", {"timeout_seconds": None}, lambda body: "timeout_seconds" in body),
    ],
)
def test_null_removes_a_field(target: str, patch: dict[str, Any], gone: Any) -> None:
    plain = create_backend(target, environ={}).render(job_from_dict(BASE_JOB), SETTINGS[target])
    assert gone(plain.create.body)
    request = render(target, patch)
    assert not gone(request.create.body)
    assert_valid(request)


# -- what crosstrain owns -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "patch", "path"),
    [
        ("vertex", {"labels": {"crosstrain-id": "mine"}}, "targets.vertex.patch.labels.crosstrain-id"),
        ("vertex", {"labels": None}, "targets.vertex.patch.labels"),
        ("aiplatform", {"jobId": "mine"}, "targets.aiplatform.patch.jobId"),
        ("azureml", {"properties": {"properties": None}}, "targets.azureml.patch.properties.properties"),
        ("databricks", {"idempotency_token": "mine"}, "targets.databricks.patch.idempotency_token"),
        ("databricks", {"tasks": [{"task_key": "train"}]}, "targets.databricks.patch.tasks"),
    ],
)
def test_a_patch_may_not_change_the_identity_or_the_fingerprint(target: str, patch: Any, path: str) -> None:
    problems = refused(target, patch)
    assert any(p == path and "crosstrain owns" in m for p, m in problems), problems


# -- what the platform requires and the plan put there ------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "patch", "path", "says"),
    [
        ("vertex", {"jobSpec": None}, "targets.vertex.patch.jobSpec", "requires"),
        ("vertex", {"displayName": None}, "targets.vertex.patch.displayName", "requires"),
        ("vertex", {"jobSpec": {"workerPoolSpecs": []}}, "targets.vertex.patch.jobSpec.workerPoolSpecs", "requires"),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": [{"containerSpec": {}}]}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs[0].containerSpec.imageUri",
            "requires",
        ),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": {"0": {"containerSpec": None}}}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs[0].containerSpec",
            "plan needs",
        ),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": {"1": {"machineSpec": None}}}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs[1].machineSpec",
            "plan needs",
        ),
        (
            "vertex",
            {"jobSpec": {"workerPoolSpecs": {"1": {"replicaCount": "7"}}}},
            "targets.vertex.patch.jobSpec.workerPoolSpecs[1].replicaCount",
            "node count",
        ),
        ("aiplatform", {"trainingInput": None}, "targets.aiplatform.patch.trainingInput", "plan needs"),
        (
            "aiplatform",
            {"trainingInput": {"region": None}},
            "targets.aiplatform.patch.trainingInput.region",
            "requires",
        ),
        (
            "aiplatform",
            {"trainingInput": {"masterConfig": {"imageUri": None}}},
            "targets.aiplatform.patch.trainingInput.masterConfig.imageUri",
            "plan needs",
        ),
        (
            "aiplatform",
            {"trainingInput": {"workerCount": "9"}},
            "targets.aiplatform.patch.trainingInput.workerCount",
            "node count",
        ),
        ("azureml", {"properties": None}, "targets.azureml.patch.properties", "requires"),
        ("azureml", {"properties": {"command": None}}, "targets.azureml.patch.properties.command", "requires"),
        (
            "azureml",
            {"properties": {"environmentId": None}},
            "targets.azureml.patch.properties.environmentId",
            "requires",
        ),
        (
            "azureml",
            {"properties": {"resources": {"instanceCount": 9}}},
            "targets.azureml.patch.properties.resources.instanceCount",
            "node count",
        ),
        ("azureml", {"properties": {"distribution": None}}, "targets.azureml.patch.properties.distribution", "owns"),
        ("databricks", {"tasks": None}, "targets.databricks.patch.tasks", "plan needs"),
        ("databricks", {"tasks": {"0": {"task_key": None}}}, "targets.databricks.patch.tasks[0].task_key", "requires"),
        (
            "databricks",
            {"tasks": {"0": {"new_cluster": {"num_workers": 9}}}},
            "targets.databricks.patch.tasks[0].new_cluster.num_workers",
            "node count",
        ),
        (
            "databricks",
            {"tasks": {"0": {"new_cluster": {"spark_version": None}}}},
            "targets.databricks.patch.tasks[0].new_cluster.spark_version",
            "plan needs",
        ),
    ],
)
def test_a_patch_may_not_remove_what_the_platform_or_the_plan_needs(
    target: str, patch: Any, path: str, says: str
) -> None:
    """A body without its job spec, its pools or its node count once rendered (exit 0), and the gcloud form and
    the local emulation then crashed reading it back."""
    problems = refused(target, patch)
    assert any(p == path and says in m for p, m in problems), problems


def test_other_labels_may_be_patched() -> None:
    request = render("vertex", {"labels": {"cost-center": "research"}})
    assert request.create.body["labels"]["cost-center"] == "research"
    assert request.create.body["labels"]["crosstrain-id"] == request.identity


@pytest.mark.parametrize("target", ["fake", "local"])
def test_targets_without_a_platform_body_refuse_a_patch(target: str) -> None:
    spec = job_from_dict({**BASE_JOB, "targets": {target: {"patch": {"x": 1}}}})
    with pytest.raises(SpecError) as caught:
        create_backend(target, environ={}).render(spec)
    assert [p.path for p in caught.value.problems] == [f"targets.{target}.patch"]
    assert "no platform request body" in caught.value.problems[0].message


def test_a_patch_from_the_command_line_is_json() -> None:
    spec = job_from_dict(BASE_JOB)
    backend = create_backend("vertex", environ={})
    request = backend.render(spec, {**SETTINGS["vertex"], "patch": '{"jobSpec": {"enableWebAccess": true}}'})
    assert request.create.body["jobSpec"]["enableWebAccess"] is True
    with pytest.raises(SpecError, match="not JSON"):
        backend.render(spec, {**SETTINGS["vertex"], "patch": "{jobSpec: "})


def test_the_committed_schemas_are_those_the_pinned_sdks_give() -> None:
    """Each schema names the SDK release it was generated from; under the lock (`nox -s tests`, CI) those are the
    installed ones. `nox -s latest` and `lowest` install others, whose schemas may differ: nothing to compare."""
    import json
    from importlib.metadata import version

    paths = sorted((ROOT / "src" / "crosstrain" / "backends").glob("*/schema.json"))
    assert len(paths) == 5  # every platform that takes a patch
    for path in paths:
        distribution, release = json.loads(path.read_text())["source"].split(":")[0].split()
        if version(distribution) != release:
            pytest.skip(f"{path.name} is generated from {distribution} {release}; {version(distribution)} is installed")
    done = subprocess.run(
        [sys.executable, "-m", "crosstrain.schemas.generate", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_every_example_in_the_docs_renders_and_is_valid() -> None:
    import re

    import yaml

    text = (ROOT / "docs" / "patch.md").read_text()
    examples = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)]
    tried = set()
    for example in examples:
        ((target, section),) = example["targets"].items()
        if target not in SETTINGS:
            continue
        spec = job_from_dict({**BASE_JOB, "targets": {target: {**SETTINGS[target], **section}}})
        assert_valid(create_backend(target, environ={}).render(spec))
        tried.add(target)
    assert tried == set(SETTINGS)


def test_the_gcloud_form_keeps_a_patched_machine_and_says_what_it_cannot_send() -> None:
    patch = {
        "jobSpec": {"workerPoolSpecs": {"0": {"machineSpec": {"tpuTopology": "2x2"}}}},
        "encryptionSpec": {"kmsKeyName": "projects/p/locations/l/keyRings/r/cryptoKeys/k"},
    }
    text = create_backend("vertex", environ={}).format(render("vertex", patch), "gcloud")
    assert "tpuTopology: 2x2" in text  # in the --config file: the flags have no TPU topology
    assert "# gcloud has no flag or config field for encryptionSpec" in text


def test_checking_a_patch_imports_no_cloud_sdk() -> None:
    from crosstrain.testing.conformance import HEAVY_MODULES
    from tests.test_imports import BLOCKER, importtime

    code = (
        "from crosstrain.loader import job_from_dict; from crosstrain.registry import create_backend\n"
        f"spec = job_from_dict({BASE_JOB!r} | {{'targets': {{'azureml': {{'patch': {USEFUL['azureml'][0]!r}}}}}}})\n"
        f"create_backend('azureml', environ={{}}).render(spec, {SETTINGS['azureml']!r})\n"
    )
    modules = importtime(BLOCKER.format(heavy=HEAVY_MODULES) + code)
    assert "crosstrain.patch" in modules
    assert not [m for m in modules if m.startswith(HEAVY_MODULES)]


def test_the_az_yaml_says_which_patched_fields_it_cannot_write() -> None:
    patch = {"properties": {"notificationSetting": {"emails": ["ml@example.com"]}}}
    text = create_backend("azureml", environ={}).format(render("azureml", patch), "az-yaml")
    assert text.startswith("# not in this YAML: notificationSetting")
    assert (
        not create_backend("azureml", environ={})
        .format(render("azureml", USEFUL["azureml"][0]), "az-yaml")
        .startswith("#")
    )


def _null_patches(body: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str, Any]]:
    """A patch removing each field of `body` in turn (list elements patched by position), with its dotted path."""
    items = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list) else ()
    for key, value in items:
        here = (*path, key)
        patch: Any = None
        for part in reversed(here):
            patch = {str(part): patch}
        yield ".".join(map(str, here)), patch
        yield from _null_patches(value, here)


@pytest.mark.parametrize("target", ["vertex", "aiplatform", "azureml", "databricks"])
def test_removing_any_field_is_refused_or_reads_back_everywhere(target: str) -> None:
    """Every field of the rendered body removed in turn: the render refuses it at its path, or the native form and
    the local emulation read the patched body (they once crashed on a KeyError)."""
    from crosstrain.errors import Unsupported

    backend = create_backend(target, environ={})
    local = create_backend("local", environ={})
    plain = backend.render(job_from_dict(BASE_JOB), SETTINGS[target])
    tried, refusals = 0, []
    for where, patch in _null_patches(plain.create.body):
        spec = job_from_dict(deep_merge(BASE_JOB, {"targets": {target: {**SETTINGS[target], "patch": patch}}}))
        tried += 1
        try:
            request = backend.render(spec)
        except SpecError as refusal:
            refusals += [(where, p.path) for p in refusal.problems]
            continue
        for form in backend.formats:
            assert backend.format(request, form), (where, form)
        try:
            local.render(spec, {"emulate": target})
        except (SpecError, Unsupported) as refusal:  # a body the emulation cannot run says why, at a path
            refusals += [(where, p.path if p.fix else "") for p in refusal.problems]
    assert tried > 20
    assert refusals
    assert all(path for _, path in refusals), refusals


def test_a_patch_that_overrides_the_plan_says_so_value_by_value() -> None:
    """The plan built each value from the job; a patch may change one, and the render says which and how."""
    job = deep_merge(BASE_JOB, {"primary": {"machine": "V100:1"}, "workers": {"replicas": 1, "machine": "V100:1"}})
    rendered = create_backend("vertex", environ={}).render(job_from_dict(job), {"project": "p"})
    pools = rendered.create.body["jobSpec"]["workerPoolSpecs"]
    slower = [merge(pool, {"machineSpec": {"acceleratorType": "NVIDIA_TESLA_T4"}}) for pool in pools]
    patch = {"displayName": "mine", "jobSpec": {"workerPoolSpecs": slower, "enableWebAccess": True}}
    request = create_backend("vertex", environ={}).render(
        job_from_dict(deep_merge(job, {"targets": {"vertex": {"patch": patch}}})), {"project": "p"}
    )
    overrides = [note for note in request.notes if " overrides " in note]
    assert any("displayName" in note and '"mine"' in note for note in overrides)
    for index in range(len(pools)):
        assert any(
            f"jobSpec.workerPoolSpecs[{index}].machineSpec.acceleratorType" in note
            and "NVIDIA_TESLA_T4" in note
            and "NVIDIA_TESLA_V100" in note
            for note in overrides
        ), overrides
    assert not any("enableWebAccess" in note for note in overrides)  # added, not overridden


def test_a_reduction_server_without_gpus_says_so_plainly() -> None:
    job = deep_merge(BASE_JOB, {"primary": {"machine": "n1-standard-8"}, "workers": {"replicas": 1}})
    job["workers"]["machine"] = "n1-standard-8"
    job["reduction_server"] = {"replicas": 1}
    with pytest.raises(SpecError) as refused:
        create_backend("vertex", environ={}).render(job_from_dict(job), {"project": "p"})
    assert "and primary and workers have no GPUs" in str(refused.value)
    assert "neither" not in str(refused.value)
