"""The azureml backend against the real azure-ai-ml 1.35.2: what `MLClient.jobs.create_or_update` sends for a job
must equal what `render()` says, every rendered YAML must load with `azure.ai.ml.load_job`, and submit/status/
wait/cancel must survive faults injected at the transport with exactly one job.

Golden files: `CROSSTRAIN_UPDATE_GOLDEN=1 pytest tests/backends/test_azureml.py` rewrites
tests/backends/golden/azureml/*.json from the examples; review the diff like code.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shlex
import shutil
import string
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from azure.core.credentials import AccessTokenInfo
from azure.core.exceptions import IncompleteReadError, ServiceRequestError, ServiceResponseError
from azure.core.rest import HttpRequest

from crosstrain import launch
from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import (
    AML_IGNORE_FILES,
    API_VERSION,
    BLOB_CONTAINER,
    FINGERPRINT_PROPERTY,
    SAS_CONTAINER,
    STATE_MAP,
)
from crosstrain.backends.azureml.wire import anonymous_environment_version, code_content_hash, iso_duration, seconds_of
from crosstrain.backends.loopback import Call, LoopbackPlatform
from crosstrain.errors import (
    IdentityConflict,
    JobFailed,
    MissingDependency,
    SpecError,
    SubmitError,
    TransientError,
    Unsupported,
)
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.runtime import detect
from crosstrain.spec import TrainingJob
from crosstrain.testing.conformance import BASE_JOB, BackendConformance, SendConformance, merge
from tests.backends.azureml_cloud import (
    SUBSCRIPTION,
    WORKSPACE,
    AzureMLPlatform,
    AzureMLService,
    AzureMLTransport,
    FakeCredential,
    LoopbackTransport,
    blob_container,
    user_token,
)
from tests.conftest import ROOT

SETTINGS = {**WORKSPACE, "compute": "gpu-cluster"}
ARM_WS = (
    f"/subscriptions/{SUBSCRIPTION}/resourceGroups/my-rg/providers/Microsoft.MachineLearningServices/workspaces/my-ws"
)
GOLDEN = Path(__file__).parent / "golden" / "azureml"
EXAMPLES = sorted(ROOT.glob("examples/azureml-*.yaml"))


class TestAzureMLConformance(BackendConformance):
    target = "azureml"
    settings = SETTINGS
    refused = [
        ({"reduction_server": {"replicas": "auto"}}, "reduction server"),
        ({"parameter_servers": {"replicas": 1}}, "parameter servers"),
        ({"evaluators": {"replicas": 1}}, "evaluators"),
        ({"workers": {"image": "registry.example/other:2.0"}}, "one image on every node"),
        ({"workers": {"machine": "A100:8"}}, "one machine on every node"),
        ({"scheduling": {"max_restarts": 2}}, "no restart count"),
        ({"primary": {"boot_disk": {"size_gb": 100}}}, "disk"),
        ({"network": "vnet-1"}, "virtual network"),
        ({"identity": "someone@example.com"}, "not an Azure ML job identity"),
    ]


@pytest.fixture(autouse=True)
def _quiet_sdk() -> Iterator[None]:
    """azure-ai-ml logs "experimental class" notices at import and use."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def job(**changes: Any) -> TrainingJob:
    return job_from_dict(merge(BASE_JOB, changes))


def render(spec: TrainingJob, **settings: Any) -> Request:
    return create_backend("azureml", environ={}).render(spec, {**SETTINGS, **settings})


def body(request: Request) -> dict[str, Any]:
    props: dict[str, Any] = request.create.body["properties"]
    return props


def sdk_calls(sdk_job: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    """What `MLClient.jobs.create_or_update` puts on the wire for `sdk_job` (outside a git repo, where the SDK
    would add the repo's commit to `properties`; crosstrain's render is the same wherever it runs)."""
    from azure.ai.ml import MLClient

    monkeypatch.chdir(tmp_path)
    transport = AzureMLTransport(AzureMLService())
    ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=transport)
    ml.jobs.create_or_update(sdk_job)
    return [(r.method, r.url, r.body) for r in transport.requests]


def rendered_calls(request: Request) -> list[tuple[str, str, Any]]:
    return [(c.method, c.url, c.body) for c in request.calls]


def create_calls(request: Request) -> list[tuple[str, str, Any]]:
    """The rendered calls `create_or_update` makes: all but the GET that looks for the job first."""
    assert (request.calls[0].method, request.calls[0].url) == ("GET", request.create.url)
    return rendered_calls(request)[1:]


# -- parity with the SDK -----------------------------------------------------------------------------------
def _cases() -> dict[str, tuple[TrainingJob, dict[str, Any], dict[str, Any]]]:
    """name -> (spec, settings, the same job written with azure.ai.ml.command's keyword arguments)."""
    from azure.ai.ml import Input, MpiDistribution, Output, PyTorchDistribution, TensorFlowDistribution
    from azure.ai.ml.entities import Environment, ManagedIdentityConfiguration, UserIdentityConfiguration

    image = BASE_JOB["image"]
    common = {
        "command": "python -m train --epochs 2",
        "environment": Environment(image=image),
        "environment_variables": {"NCCL_DEBUG": "INFO"},
        "instance_count": 3,
        "timeout": 7200,
        "tags": {"team": "ml"},
    }
    return {
        "pytorch-per-process": (
            job(),
            {},
            {**common, "compute": "gpu-cluster", "distribution": PyTorchDistribution(process_count_per_instance=4)},
        ),
        "pytorch-per-node": (
            job(launch={"mode": "per-node"}),
            {},
            {
                **common,
                "command": "python -m crosstrain.launch --nproc-per-node 4 --nnodes 3 -- python -m train --epochs 2",
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=1),
            },
        ),
        "mpi": (
            job(launch={"framework": "mpi"}),
            {"shm_size": "16g", "docker_args": "--ipc=host"},
            {
                **common,
                "compute": "gpu-cluster",
                "distribution": MpiDistribution(process_count_per_instance=4),
                "shm_size": "16g",
                "docker_args": "--ipc=host",
            },
        ),
        # DeepSpeed as Azure's own example runs it (azureml-examples cli/jobs/deepspeed/deepspeed-training):
        # the PyTorch distribution, a process per GPU, `--deepspeed --deepspeed_config FILE` after the arguments.
        "deepspeed": (
            job(launch={"framework": "deepspeed", "deepspeed_config": "/etc/ds.json"}),
            {},
            {
                **common,
                "command": "python -m train --epochs 2 --deepspeed --deepspeed_config /etc/ds.json",
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
            },
        ),
        # DeepSpeed under MPI, as the guide's DeepSpeed section says: chosen with a v1 MpiConfiguration.
        "deepspeed-mpi": (
            job(launch={"framework": "deepspeed"}),
            {"distributed_job_config": "MpiConfiguration(process_count_per_node=4, node_count=3)"},
            {
                **common,
                "command": "python -m train --epochs 2 --deepspeed",
                "compute": "gpu-cluster",
                "distribution": MpiDistribution(process_count_per_instance=4),
            },
        ),
        "horovod": (
            job(launch={"framework": "horovod"}),
            {},
            {**common, "compute": "gpu-cluster", "distribution": MpiDistribution(process_count_per_instance=4)},
        ),
        "tensorflow": (
            job(launch={"framework": "tensorflow"}),
            {"priority": "high"},
            {
                **common,
                "compute": "gpu-cluster",
                "distribution": TensorFlowDistribution(worker_count=3, parameter_server_count=0),
                "priority": "high",
            },
        ),
        "named-compute-and-environment": (
            job(identity="11111111-2222-3333-4444-555555555555", scheduling={"timeout": "1d1h1m1s"}),
            {"compute": "a100-cluster", "environment": "azureml:my-env:3", "experiment": "crosstrain"},
            {
                **common,
                "environment": "azureml:my-env:3",
                "compute": "a100-cluster",
                "experiment_name": "crosstrain",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
                "identity": ManagedIdentityConfiguration(client_id="11111111-2222-3333-4444-555555555555"),
                "timeout": 90061,
            },
        ),
        # A job that runs as its submitter: the SDK also sends the submitter's token on the job PUT (see
        # test_a_user_identity_sends_the_submitters_token_on_the_job_put_only).
        "user-identity": (
            job(identity="user_identity"),
            {},
            {
                **common,
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
                "identity": UserIdentityConfiguration(),
            },
        ),
        "inputs-and-outputs": (
            job(
                command=["python", "-m", "train", "--data", "${inputs.data}", "--labels", "${inputs.labels}"],
                args=["--table", "${inputs.table}", "--out", "${outputs.model}"],
                inputs={
                    "data": "azureml:cifar10:3",
                    "labels": {"path": "https://acct.blob.core.windows.net/c/labels.csv", "type": "file"},
                    "table": {"path": "azureml://datastores/ws/paths/t/", "type": "table", "mode": "download"},
                    "raw": {"path": "abfss://c@acct.dfs.core.windows.net/raw/", "mode": "direct"},
                },
                outputs={
                    "model": {"path": "azureml://datastores/ws/paths/out/", "mode": "upload"},
                    "logs": {},
                    "metrics": {"type": "file", "mode": "mount"},
                },
            ),
            {},
            {
                **common,
                "command": "python -m train --data '${{inputs.data}}' --labels '${{inputs.labels}}' --table "
                "'${{inputs.table}}' --out '${{outputs.model}}'",
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
                "inputs": {
                    "data": Input(path="azureml:cifar10:3"),
                    "labels": Input(type="uri_file", path="https://acct.blob.core.windows.net/c/labels.csv"),
                    "table": Input(type="mltable", path="azureml://datastores/ws/paths/t/", mode="download"),
                    "raw": Input(path="abfss://c@acct.dfs.core.windows.net/raw/", mode="direct"),
                },
                "outputs": {
                    "model": Output(path="azureml://datastores/ws/paths/out/", mode="upload"),
                    "logs": Output(type="uri_folder"),
                    "metrics": Output(type="uri_file", mode="rw_mount"),
                },
            },
        ),
        "model-data": (
            job(
                command=["python", "-m", "train", "--base", "${inputs.base}", "--adapter", "${inputs.adapter}"],
                args=["--out", "${outputs.model}"],
                inputs={
                    "base": {"path": "azureml:llama-base:3", "type": "mlflow_model"},
                    "adapter": {"path": "azureml://datastores/ws/paths/adapters/a/", "type": "custom_model"},
                },
                outputs={
                    "model": {"type": "mlflow_model"},
                    "weights": {"path": "azureml://datastores/ws/paths/w/", "type": "custom_model", "mode": "upload"},
                },
            ),
            {},
            {
                **common,
                "command": "python -m train --base '${{inputs.base}}' --adapter '${{inputs.adapter}}' --out "
                "'${{outputs.model}}'",
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
                "inputs": {
                    "base": Input(type="mlflow_model", path="azureml:llama-base:3"),
                    "adapter": Input(type="custom_model", path="azureml://datastores/ws/paths/adapters/a/"),
                },
                "outputs": {
                    "model": Output(type="mlflow_model"),
                    "weights": Output(type="custom_model", path="azureml://datastores/ws/paths/w/", mode="upload"),
                },
            },
        ),
        "shell-line": (
            job(shell=True, command='cd src && python -m train --rank "$RANK" && echo done', args=["--epochs", "2"]),
            {},
            {
                **common,
                "command": 'cd src && python -m train --rank "$RANK" && echo done --epochs 2',
                "compute": "gpu-cluster",
                "distribution": PyTorchDistribution(process_count_per_instance=4),
            },
        ),
        "serverless-spot": (
            job(primary={"machine": "H100:8"}, scheduling={"spot": True}),
            {"compute": None},
            {
                **common,
                "instance_type": "Standard_ND96isr_H100_v5",
                "job_tier": "Spot",
                "distribution": PyTorchDistribution(process_count_per_instance=8),
            },
        ),
    }


CASES = [
    "pytorch-per-process",
    "pytorch-per-node",
    "mpi",
    "deepspeed",
    "deepspeed-mpi",
    "horovod",
    "tensorflow",
    "named-compute-and-environment",
    "user-identity",
    "serverless-spot",
    "inputs-and-outputs",
    "model-data",
    "shell-line",
]


@pytest.mark.parametrize("case", CASES)
def test_create_or_update_sends_what_render_says(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from azure.ai.ml import command
    from azure.ai.ml import load_job as sdk_load_job
    from azure.ai.ml.entities import Command

    spec, settings, sdk_kwargs = _cases()[case]
    request = render(spec, **settings)
    sdk_kwargs.setdefault("experiment_name", spec.name)
    fingerprint = {FINGERPRINT_PROPERTY: request.fingerprint}
    by_hand = command(name=request.identity, display_name=spec.name, properties=fingerprint, **sdk_kwargs)
    assert sdk_calls(by_hand, tmp_path, monkeypatch) == create_calls(request)

    # The az-yaml form is the same job: it loads with the SDK's own schema and submits the same calls.
    backend = create_backend("azureml", environ={})
    job_file = tmp_path / "job.yml"
    job_file.write_text(backend.format(request, "az-yaml"))
    loaded = sdk_load_job(source=job_file)
    assert isinstance(loaded, Command)
    assert loaded._validate().passed
    assert loaded.properties == fingerprint
    assert sdk_calls(loaded, tmp_path, monkeypatch) == create_calls(request)


def test_the_job_put_goes_to_the_pinned_api_version_and_carries_the_identity() -> None:
    request = render(job())
    assert (
        request.create.url == f"https://management.azure.com{ARM_WS}/jobs/{request.identity}?api-version={API_VERSION}"
    )
    assert API_VERSION == "2025-01-01-preview"
    # look for the job, register the anonymous environment, create the job
    assert [(c.method, c.url) for c in request.calls] == [
        ("GET", request.create.url),
        ("PUT", request.calls[1].url),
        ("PUT", request.create.url),
    ]
    assert "/environments/CliV2AnonymousEnvironment/versions/" in request.calls[1].url
    assert body(request)["properties"] == {FINGERPRINT_PROPERTY: request.fingerprint}


def test_a_registered_environment_needs_no_environment_call() -> None:
    request = render(job(), environment="azureml:my-env:3")
    assert [c.method for c in request.calls] == ["GET", "PUT"]
    assert body(request)["environmentId"] == f"{ARM_WS}/environments/my-env/versions/3"
    assert any("image registry.example/train:1.0 is not used" in n for n in request.notes)


def test_anonymous_environment_version_matches_the_sdk() -> None:
    from azure.ai.ml.entities import Environment

    for image in ("registry.example/train:1.0", "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"):
        assert Environment(image=image).version == anonymous_environment_version(image)


def test_durations_match_the_sdk_and_round_trip() -> None:
    import isodate

    for seconds in (1, 59, 60, 3600, 3661, 7200, 5400, 86400, 86401, 90061, 172800, 604800):
        expected = isodate.duration_isoformat(timedelta(seconds=seconds))
        assert iso_duration(seconds) == expected
        assert seconds_of(expected) == seconds


# -- the seed's SDK v1 forms -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [
        "PyTorchConfiguration(process_count=8, node_count=2)",
        {"type": "PyTorchConfiguration", "process_count": 8, "node_count": 2},
    ],
)
def test_v1_pytorch_configuration_counts_the_total(config: Any) -> None:
    spec = job(workers=None, launch=None)
    props = body(render(spec, distributed_job_config=config))
    assert props["resources"]["instanceCount"] == 2
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 4}


def test_v1_mpi_configuration_is_per_node() -> None:
    spec = job(workers=None)
    config = "MpiConfiguration(process_count_per_node=4, node_count=2)"
    props = body(render(spec, distributed_job_config=config))
    assert props["resources"]["instanceCount"] == 2
    assert props["distribution"] == {"distributionType": "Mpi", "processCountPerInstance": 4}


def test_v1_tensorflow_configuration_sets_workers() -> None:
    props = body(render(job(workers=None), distributed_job_config="TensorflowConfiguration(worker_count=2)"))
    assert props["distribution"] == {"distributionType": "TensorFlow", "workerCount": 2, "parameterServerCount": 0}
    assert props["resources"]["instanceCount"] == 2


@pytest.mark.parametrize(
    "config",
    ["PyTorchConfiguration(process_count=8, node_count=2)", "MpiConfiguration(process_count_per_node=4, node_count=2)"],
)
def test_v1_configuration_with_data_renders_both(config: str) -> None:
    """Placing `${inputs.NAME}` once counted as the user setting `workers`, so the render's own plan disagreed
    with the check's (the v1 node count against 1 node) and crashed."""
    spec = job(
        workers=None,
        launch=None,
        command=["python", "train.py", "--data", "${inputs.train}", "--out", "${outputs.model}"],
        inputs={"train": "azureml:cifar10:3"},
        outputs={"model": {"path": "azureml://datastores/workspaceblobstore/paths/runs/", "mode": "upload"}},
    )
    props = body(render(spec, distributed_job_config=config))
    assert props["resources"]["instanceCount"] == 2
    assert props["distribution"]["processCountPerInstance"] == 4
    assert "--data '${{inputs.train}}' --out '${{outputs.model}}'" in props["command"]
    assert set(props["inputs"]) == {"train"}
    assert set(props["outputs"]) == {"model"}


def test_v1_pytorch_configuration_without_process_count_runs_one_per_node() -> None:
    props = body(render(job(workers=None), distributed_job_config="PyTorchConfiguration(node_count=2)"))
    assert props["distribution"]["processCountPerInstance"] == 1


@pytest.mark.parametrize(
    ("changes", "config", "words"),
    [
        ({}, "PyTorchConfiguration(process_count=8, node_count=2)", "spec has 3"),
        ({"workers": None}, "PyTorchConfiguration(process_count=7, node_count=2)", "spread evenly"),
        ({"workers": None, "launch": {"framework": "mpi"}}, "PyTorchConfiguration(node_count=2)", "framework is mpi"),
        ({"workers": None, "launch": {"framework": "horovod"}}, "PyTorchConfiguration(node_count=2)", "is horovod"),
        (
            {"workers": None, "launch": {"framework": "deepspeed"}},
            "TensorflowConfiguration(worker_count=2)",
            "deepspeed",
        ),
        ({"workers": None, "launch": {"processes_per_node": 2}}, "MpiConfiguration(process_count_per_node=4)", "is 2"),
        (
            {"workers": None, "launch": {"mode": "per-node"}},
            "PyTorchConfiguration(process_count=8, node_count=2)",
            "one process per node",
        ),
        ({"workers": None}, "TensorflowConfiguration(worker_count=2, parameter_server_count=1)", "less than or equal"),
        ({"workers": None}, "DeepSpeedConfiguration(node_count=2)", "not an SDK v1 distribution"),
    ],
)
def test_v1_configurations_that_contradict_the_spec_are_refused(
    changes: dict[str, Any], config: str, words: str
) -> None:
    with pytest.raises(SpecError) as refused:
        render(job(**changes), distributed_job_config=config)
    assert words in str(refused.value)
    assert all(p.path.startswith("targets.azureml.distributed_job_config") for p in refused.value.problems)


def test_per_node_command_means_the_seeds_torch_distributed_launch_line() -> None:
    """The guide's per-node line and our render start the same processes with the same rendezvous."""
    from torch.distributed.run import get_args_parser

    seed = (
        "--nproc_per_node 4 --nnodes 2 --node_rank $NODE_RANK --master_addr $MASTER_ADDR "
        "--master_port $MASTER_PORT train.py --epochs 50"
    )
    # What Azure ML's pytorch distribution sets on the second node (azure.md 6.1); the shell expands them.
    azure_env = {"NODE_RANK": "1", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "2"}
    theirs = get_args_parser().parse_args([string.Template(a).substitute(azure_env) for a in shlex.split(seed)])

    spec = job(command="python train.py", args=["--epochs", "50"], workers={"replicas": 1}, launch={"mode": "per-node"})
    props = body(render(spec))
    # Azure starts the launcher once per node and sets WORLD_SIZE = instance_count, NODE_RANK, MASTER_ADDR and
    # MASTER_PORT for it: the values the seed passes by hand.
    assert props["distribution"] == {"distributionType": "PyTorch", "processCountPerInstance": 1}
    assert props["resources"]["instanceCount"] == int(theirs.nnodes) == int(azure_env["WORLD_SIZE"])

    # Run the launcher's own planning on each node, with the variables Azure sets there (LOCAL_RANK and RANK
    # included: with one process per node they equal 0 and NODE_RANK), and parse what it would exec.
    argv = shlex.split(props["command"])
    assert argv[:3] == ["python", "-m", "crosstrain.launch"]
    options = launch._parse(argv[3:])
    for node_rank in (0, 1):
        node_env = {**azure_env, "AZUREML_RUN_ID": "r", "NODE_RANK": str(node_rank), "RANK": str(node_rank)}
        env = launch.with_node_count(detect({**node_env, "LOCAL_RANK": "0"}), options.nnodes)
        line = launch.plan(env, options.nproc_per_node, options.command)
        ours = get_args_parser().parse_args(line[line.index("torch.distributed.run") + 1 :])
        assert (ours.nnodes, ours.nproc_per_node) == (theirs.nnodes, theirs.nproc_per_node)
        assert (ours.master_addr, ours.master_port) == (theirs.master_addr, theirs.master_port)
        assert ours.node_rank == node_rank
        assert [ours.training_script, *ours.training_script_args] == [
            "python",
            theirs.training_script,
            *theirs.training_script_args,
        ]


# -- our validation catches what load_job lets through -----------------------------------------------------
@pytest.mark.parametrize(
    ("yaml_change", "spec_changes", "settings", "path"),
    [
        ({"resources": {"instance_count": 0}}, {"workers": {"replicas": -1}}, {}, "workers.replicas"),
        (
            {"distribution": {"process_count_per_instance": 0}},
            {"launch": {"processes_per_node": 0}},
            {},
            "launch.processes_per_node",
        ),
        (
            {"distribution": {"process_count_per_instance": -1}},
            {"launch": {"processes_per_node": -1}},
            {},
            "launch.processes_per_node",
        ),
        (
            {"distribution": {"process_count_per_instance": 8}},
            {"launch": {"processes_per_node": 8}},
            {},
            "launch.processes_per_node",
        ),
        ({"resources": {"shm_size": "16GB"}}, {}, {"shm_size": "16GB"}, "targets.azureml.shm_size"),
        ({"limits": {"timeout": -5}}, {"scheduling": {"timeout": -5}}, {}, "scheduling.timeout"),
        ({"limits": {"timeout": 0}}, {"scheduling": {"timeout": 0}}, {}, "scheduling.timeout"),
    ],
)
def test_validation_catches_what_load_job_lets_through(
    yaml_change: dict[str, Any], spec_changes: dict[str, Any], settings: dict[str, Any], path: str, tmp_path: Path
) -> None:
    from azure.ai.ml import load_job as sdk_load_job
    from azure.ai.ml.entities import Command

    backend = create_backend("azureml", environ={})
    good = yaml.safe_load(backend.format(render(job()), "az-yaml"))
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(merge(good, yaml_change)))
    loaded = sdk_load_job(source=bad)
    assert isinstance(loaded, Command)
    assert loaded._validate().passed  # the SDK's schema lets it through...

    with pytest.raises(SpecError) as refused:  # ...crosstrain does not, and says where
        render(job_from_dict(merge(BASE_JOB, spec_changes)), **settings)
    assert path in [p.path for p in refused.value.problems]


@pytest.mark.parametrize(
    ("changes", "settings", "path", "words"),
    [
        ({"primary": {"machine": None}}, {"compute": None}, "primary.machine", "serverless"),
        ({"image": None}, {}, "image", "environment"),
        ({}, {"environment": "azureml:my-env@v2"}, "targets.azureml.environment", "@latest"),
        ({}, {"environment": "azureml:my-env"}, "targets.azureml.environment", "registry URI"),
        ({"requirements": ["numpy"]}, {}, "requirements", "set `code:`"),
        ({"launch": {"framework": "tensorflow", "mode": "per-node"}}, {}, "launch.mode", "TF_CONFIG"),
        ({"scheduling": {"spot": True}}, {"job_tier": "premium"}, "targets.azureml.job_tier", "spot"),
        ({"output_dir": "azureml://datastores/x/paths/y"}, {}, "output_dir", "outputs"),
        ({"scheduling": {"max_wait": "1h"}}, {}, "scheduling.max_wait", "deadline"),
        # The hint once named A100:8 only: Azure's 4-GPU A100 size carries the 80 GB kind.
        ({"primary": {"machine": "A100:4"}}, {}, "primary.machine.accelerator.count", "A100-80GB:4 (Standard_NC96ads"),
    ],
)
def test_what_azure_cannot_express_is_refused(
    changes: dict[str, Any], settings: dict[str, Any], path: str, words: str
) -> None:
    with pytest.raises(Unsupported) as refused:
        render(job(**changes), **settings)
    problem = next(p for p in refused.value.problems if p.path == path)
    assert words in problem.message + problem.fix
    assert problem.fix


def test_infiniband_note_for_multi_node_gpu_jobs_without_it() -> None:
    def ib_notes(spec: TrainingJob) -> list[str]:
        return [n for n in render(spec, compute=None).notes if "InfiniBand" in n]

    assert ib_notes(job(primary={"machine": "T4:1"}))  # Standard_NC4as_T4_v3 x 3 nodes
    assert ib_notes(job(primary={"machine": "Standard_NC24s_v3"}))
    assert not ib_notes(job(primary={"machine": "Standard_NC24rs_v3"}))
    assert not ib_notes(job(primary={"machine": "H100:8"}))
    assert not ib_notes(job(primary={"machine": "T4:1"}, workers=None))  # one node


def test_cli_prints_az_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    from crosstrain.cli import main

    assert main(["render", str(ROOT / "examples/azureml-seed-pytorch.yaml"), "--format", "az-yaml"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["type"] == "command"
    assert printed["distribution"] == {"type": "pytorch", "process_count_per_instance": 4}
    assert printed["resources"]["instance_count"] == 2


# -- golden files ------------------------------------------------------------------------------------------
def test_there_are_azureml_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_their_golden_files(example: Path) -> None:
    request = create_backend("azureml", environ={}).render(load_job(example))
    text = json.dumps(request.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    golden = GOLDEN / f"{example.stem}.json"
    if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.read_text() == text, f"rerun with CROSSTRAIN_UPDATE_GOLDEN=1 and review {golden}"


# -- submit, status, wait, cancel through the real MLClient ------------------------------------------------
class TestAzureMLSends(SendConformance):
    target = "azureml"

    @pytest.fixture
    def platform(self) -> Iterator[LoopbackPlatform]:
        with AzureMLPlatform() as platform:
            yield platform


@pytest.fixture
def cloud() -> Iterator[AzureMLPlatform]:
    with AzureMLPlatform(statuses=("Queued", "Running", "Completed")) as platform:
        yield platform


def backend_on(cloud: AzureMLPlatform, sleeps: list[float] | None = None, **kwargs: Any) -> AzureMLBackend:
    policy = RetryPolicy(sleep=(sleeps if sleeps is not None else []).append, call_timeout=cloud.call_timeout)
    options: dict[str, Any] = {"transport": cloud.transport, "credential": FakeCredential(), **kwargs}
    backend = create_backend("azureml", retry=policy, environ={}, **options)
    assert isinstance(backend, AzureMLBackend)
    return backend


def job_calls(cloud: AzureMLPlatform) -> list[tuple[str, str]]:
    """(method, outcome) of every request for a job."""
    return [(r.method, r.outcome) for r in cloud.transport.requests if "/jobs/" in r.url]


def test_submit_sends_exactly_the_rendered_calls(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    request = backend.render(job(), SETTINGS)
    handle = backend.send(request)
    assert [(r.method, r.url, r.body) for r in cloud.transport.requests] == rendered_calls(request)
    assert [r.outcome for r in cloud.transport.requests] == ["404", "201", "201"]
    assert all(r.headers["Authorization"] == "Bearer fake-token" for r in cloud.transport.requests)
    assert "Authorization" not in json.dumps(request.to_dict())
    assert handle.job_id == request.identity
    assert handle.console_url == f"https://ml.azure.com/runs/{request.identity}"
    assert not handle.adopted
    stored = cloud.service.resources[cloud.service.job(request.identity)]
    assert stored["properties"]["properties"] == {FINGERPRINT_PROPERTY: request.fingerprint}


def test_a_user_identity_sends_the_submitters_token_on_the_job_put_only(
    cloud: AzureMLPlatform, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`identity: user_identity` is `{"identityType": "UserIdentity"}`, and azure-ai-ml's `create_or_update` then
    sends the header x-azureml-token, the submitter's token for https://ml.azure.com from the same credential
    (`_set_headers_with_user_aml_token`). The render says so and holds no token; submit adds it to the job PUT,
    and to nothing else: not the lookup, not the environment PUT."""
    from azure.ai.ml import MLClient, command
    from azure.ai.ml.entities import Environment, UserIdentityConfiguration

    backend = backend_on(cloud)
    request = backend.render(job(identity="user_identity"), SETTINGS)
    assert body(request)["identity"] == {"identityType": "UserIdentity"}
    assert "x-azureml-token" in request.create.purpose
    assert "x-azureml-token" not in {h.lower() for call in request.calls for h in call.headers}
    token = user_token()
    assert token not in request.to_json()
    backend.send(request)
    sent = [(r.method, r.url.split("?")[0], r.headers.get("x-azureml-token")) for r in cloud.transport.requests]
    assert [(method, url.rsplit("/", 2)[-2], given) for method, url, given in sent] == [
        ("GET", "jobs", None),
        ("PUT", "versions", None),  # the anonymous environment
        ("PUT", "jobs", token),
    ]
    assert ("https://ml.azure.com/.default",) in backend.credential.scopes  # type: ignore[union-attr]

    # the SDK sends it so too
    monkeypatch.chdir(tmp_path)
    transport = AzureMLTransport(AzureMLService())
    ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=transport)
    ml.jobs.create_or_update(
        command(
            command="python -m train",
            environment=Environment(image=BASE_JOB["image"]),
            compute="gpu-cluster",
            identity=UserIdentityConfiguration(),
        )
    )
    assert [r.headers.get("x-azureml-token") for r in transport.requests] == [None, token]


def test_a_token_for_another_audience_is_refused_before_anything_is_made(cloud: AzureMLPlatform) -> None:
    """As azure-ai-ml refuses it: a credential whose token for Azure ML is not for https://ml.azure.com."""
    backend = backend_on(cloud, credential=FakeCredential(aml_audience="https://management.azure.com"))
    with pytest.raises(SubmitError, match=re.escape("is for https://management.azure.com")):
        backend.submit(job(identity="user_identity"), SETTINGS)
    assert [(r.method, r.outcome) for r in cloud.transport.requests] == [("GET", "404")]
    assert cloud.service.jobs == []


def test_every_call_carries_the_client_timeout(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    handle = backend.submit(job(), SETTINGS)
    backend.status(handle)
    backend.cancel(handle)
    assert len(cloud.transport.requests) == 5
    assert {r.read_timeout for r in cloud.transport.requests} == {cloud.call_timeout}


@pytest.mark.parametrize(
    ("operation", "fault", "statuses", "final"),
    [
        ("create", "refuse", ("Running", "Completed"), JobState.SUCCEEDED),
        ("environment", "rate-limit", ("Running", "Failed"), JobState.FAILED),
        ("create", "drop", ("Preparing", "Running", "Completed"), JobState.SUCCEEDED),
        ("create", "unreachable", ("NotResponding",), JobState.FAILED),
        ("create", "error", ("Completed",), JobState.SUCCEEDED),
        ("create", "slow", ("Completed",), JobState.SUCCEEDED),
        ("create", "late", ("Completed",), JobState.SUCCEEDED),
        ("environment", "drop", ("Completed",), JobState.SUCCEEDED),
    ],
)
def test_faults_end_with_one_job_and_the_right_final_state(
    operation: str, fault: str, statuses: tuple[str, ...], final: JobState
) -> None:
    with AzureMLPlatform(statuses=statuses) as cloud:
        if fault == "unreachable":
            cloud.transport.unreachable("PUT", "/jobs/")
        else:
            cloud.service.inject(operation, fault)
        sleeps: list[float] = []
        backend = backend_on(cloud, sleeps)
        handle = backend.submit(job(), SETTINGS)
        cloud.settle()
        assert len(cloud.service.jobs) == 1
        assert cloud.live_jobs(handle.identity) == [handle.job_id]
        if fault == "rate-limit":
            assert sleeps[0] >= 1  # the service's Retry-After
        if final is JobState.SUCCEEDED:
            assert backend.wait(handle, poll_interval=0.01).state is final
        else:
            with pytest.raises(JobFailed, match=final.value):
                backend.wait(handle, poll_interval=0.01)
        assert backend.status(handle).state is final


@pytest.mark.parametrize("fault", ["drop", "slow", "late"])
def test_faults_over_real_http_end_with_one_job(cloud: AzureMLPlatform, fault: str) -> None:
    """azure-core's own requests transport against the served fake: a closed connection and a real read
    timeout reach the adaptor as azure-core raises them."""
    cloud.service.inject("create", fault)
    backend = backend_on(cloud, transport=LoopbackTransport(cloud.url))
    handle = backend.submit(job(), SETTINGS)
    cloud.settle()
    assert cloud.live_jobs(handle.identity) == [handle.job_id]
    assert backend.wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED


def test_a_service_that_cannot_be_reached_is_a_refusal_that_leaves_no_job_behind() -> None:
    with AzureMLPlatform() as cloud:
        closed = cloud.url
    with pytest.raises(TransientError, match="could not reach Azure") as refused:
        backend_on(cloud, transport=LoopbackTransport(closed)).submit(job(), SETTINGS)
    assert refused.value.accepted is False
    assert not refused.value.job_may_exist


def test_a_dropped_answer_is_resolved_by_reading_the_job_not_by_a_second_put(cloud: AzureMLPlatform) -> None:
    cloud.service.inject("create", "drop")
    handle = backend_on(cloud).submit(job(), SETTINGS)
    assert job_calls(cloud) == [("GET", "404"), ("PUT", "dropped"), ("GET", "200")]
    assert handle.adopted


def test_a_slow_answer_times_out_and_is_resolved_by_reading_the_job(cloud: AzureMLPlatform) -> None:
    cloud.service.inject("create", "slow")
    handle = backend_on(cloud).submit(job(), SETTINGS)
    assert job_calls(cloud) == [("GET", "404"), ("PUT", "timed out"), ("GET", "200")]
    assert cloud.live_jobs(handle.identity) == [handle.job_id]


def test_a_late_create_after_a_504_makes_no_second_job(cloud: AzureMLPlatform) -> None:
    cloud.service.inject("create", "late")
    handle = backend_on(cloud).submit(job(), SETTINGS)
    cloud.settle()
    calls = job_calls(cloud)
    # The 504 is an unknown outcome; on a loaded machine it can come after the client's 0.25 s timeout, which is
    # the same outcome: either way the job is looked for before the PUT is sent again.
    assert calls[1] in (("PUT", "504"), ("PUT", "timed out"))
    assert calls[:1] + calls[2:] == [("GET", "404"), ("GET", "404"), ("PUT", "201")]
    assert cloud.live_jobs(handle.identity) == [handle.job_id]
    assert not handle.adopted


def test_resubmitting_the_same_spec_adopts_the_job_and_sends_no_put(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    first = backend.submit(job(), SETTINGS)
    sent = len(cloud.transport.requests)
    second = backend.submit(job(), SETTINGS)
    assert first == second
    assert (first.adopted, second.adopted) == (False, True)
    assert [(r.method, r.outcome) for r in cloud.transport.requests[sent:]] == [("GET", "200")]
    assert len(cloud.service.jobs) == 1


def test_a_different_request_under_a_taken_name_is_refused_before_anything_is_sent(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    first = backend.render(job(run_id="fixed"), SETTINGS)
    backend.send(first)
    sent = len(cloud.transport.requests)
    with pytest.raises(IdentityConflict) as refused:
        backend.submit(job(run_id="fixed", image="registry.example/train:2.0"), SETTINGS)
    assert refused.value.found == first.fingerprint
    assert [r.method for r in cloud.transport.requests[sent:]] == ["GET"]  # no environment PUT, no job PUT
    assert "--run-id new" in str(refused.value)
    assert "This request does not run" in str(refused.value)


def test_a_job_made_elsewhere_under_the_name_is_not_adopted(cloud: AzureMLPlatform) -> None:
    """A job made by `az ml job create` (or an older crosstrain) carries no fingerprint: refused, not adopted."""
    backend = backend_on(cloud)
    request = backend.render(job(), SETTINGS)
    made_elsewhere = {"properties": {**body(request), "properties": {}}}
    path = urlsplit(request.create.url).path
    assert cloud.service.dispatch(Call("PUT", path, {"api-version": API_VERSION}, made_elsewhere)).status == 201
    with pytest.raises(IdentityConflict, match="fingerprint is missing"):
        backend.send(request)
    assert len(cloud.service.jobs) == 1


def test_a_permanent_refusal_is_not_retried(cloud: AzureMLPlatform) -> None:
    cloud.service.inject("create", "invalid")
    with pytest.raises(SubmitError, match="400") as refused:
        backend_on(cloud).submit(job(), SETTINGS)
    assert not isinstance(refused.value, TransientError)
    assert not refused.value.job_may_exist
    assert not cloud.service.jobs
    assert [r.method for r in cloud.transport.requests if "/jobs/" in r.url] == ["GET", "PUT"]


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("unavailable", "no Azure credential is available"),
        ("refused", "Azure refused the credentials"),
    ],
)
def test_missing_or_refused_credentials_are_final_and_say_how_to_log_in(
    cloud: AzureMLPlatform, error: str, words: str
) -> None:
    from azure.core.exceptions import ClientAuthenticationError
    from azure.identity import CredentialUnavailableError

    class NoCredential(FakeCredential):
        def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
            if error == "unavailable":
                raise CredentialUnavailableError("EnvironmentCredential: not configured")
            raise ClientAuthenticationError("AADSTS7000215: Invalid client secret provided")

    with pytest.raises(SubmitError) as refused:
        backend_on(cloud, credential=NoCredential()).submit(job(), SETTINGS)
    assert not isinstance(refused.value, TransientError)
    assert words in str(refused.value)
    assert "az login" in str(refused.value)
    assert not cloud.transport.requests


def test_the_sdk_missing_says_which_extra_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from crosstrain.adaptors import azure

    monkeypatch.setitem(sys.modules, "azure.ai.ml", None)
    with pytest.raises(MissingDependency, match=r"pip install 'crosstrain\[azureml\]'"):
        azure.ml()


@pytest.mark.parametrize(
    ("make", "accepted"),
    [
        (lambda: ServiceRequestError("connection refused"), False),
        (lambda: ServiceResponseError("read timed out"), None),
        (lambda: IncompleteReadError("cut short"), None),
        (lambda: _http_error(503), False),
        (lambda: _http_error(429), False),
        (lambda: _http_error(500), None),
        (lambda: _http_error(504), None),
        (lambda: _http_error(400), "final"),
        (lambda: _http_error(404), "final"),
        (lambda: _http_error(409), "final"),
    ],
    ids=["request", "response", "incomplete", "503", "429", "500", "504", "400", "404", "409"],
)
def test_the_adaptor_maps_azure_errors_to_the_three_kinds(make: Callable[[], Exception], accepted: Any) -> None:
    from crosstrain.adaptors import azure

    mapped = azure.translate(make(), "PUT job")
    assert isinstance(mapped, SubmitError)
    if accepted == "final":
        assert not isinstance(mapped, TransientError)
    else:
        assert isinstance(mapped, TransientError)
        assert mapped.accepted is accepted
    assert "PUT job" in str(mapped)
    assert azure.translate(KeyError("a bug"), "PUT job").__class__ is KeyError  # a bug stays a bug


def _http_error(status: int) -> Exception:
    from azure.core.exceptions import HttpResponseError

    from tests.backends.azureml_cloud import _response

    request = HttpRequest("PUT", "https://management.azure.com/x")
    headers = {"Retry-After": "3"} if status == 429 else {}
    return HttpResponseError(response=_response(request, status, {"error": {"message": "m"}}, headers))


def test_a_429_carries_the_services_retry_after() -> None:
    from crosstrain.adaptors import azure

    mapped = azure.translate(_http_error(429), "PUT job")
    assert isinstance(mapped, TransientError)
    assert mapped.retry_after == 3


@pytest.mark.parametrize("failure", ["job failed", "service unavailable", None])
def test_logs_are_what_the_sdk_streams(failure: str | None) -> None:
    """`MLClient.jobs.stream` prints the logs and raises `JobException` when the job failed: the lines count,
    the failure is the state's to report; any other error is crosstrain's."""
    from azure.ai.ml.exceptions import JobException

    from crosstrain.adaptors import azure

    class Jobs:
        def stream(self, name: str) -> None:
            print(f"{name}: epoch 1")
            if failure == "job failed":
                raise JobException(message="the job failed", no_personal_data_message="the job failed")
            if failure == "service unavailable":
                raise _http_error(503)

    class Client:
        jobs = Jobs()

    if failure == "service unavailable":
        with pytest.raises(TransientError):
            azure.stream_logs(Client(), "job-1")
    else:
        assert azure.stream_logs(Client(), "job-1") == ["job-1: epoch 1"]


@pytest.mark.parametrize("native", sorted(STATE_MAP))
def test_status_maps_every_azure_status(cloud: AzureMLPlatform, native: str) -> None:
    backend = backend_on(cloud)
    handle = backend.submit(job(), SETTINGS)
    cloud.set_state(handle, native)
    status = backend.status(handle)
    assert (status.state, status.native_state) == (STATE_MAP[native], native)


def test_the_state_map_is_the_sdks_job_status_enum() -> None:
    from azure.ai.ml._restclient.arm_ml_service.models import JobStatus

    assert set(STATE_MAP) == {status.value for status in JobStatus}


def test_status_polls_retry_transient_errors(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    handle = backend.submit(job(), SETTINGS)
    cloud.service.inject("get", "refuse", "error", "drop")
    cloud.transport.unreachable("GET", "/jobs/")
    assert backend.wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED


def test_cancel_through_the_sdk(cloud: AzureMLPlatform) -> None:
    backend = backend_on(cloud)
    handle = backend.submit(job(), SETTINGS)
    backend.cancel(handle)
    assert any(
        r.method == "POST" and r.url.split("?")[0].endswith(f"/jobs/{handle.job_id}/cancel")
        for r in cloud.transport.requests
    )
    with pytest.raises(JobFailed, match="CANCELLED"):
        backend.wait(handle, poll_interval=0.01)


def test_handle_survives_a_new_process_shape(cloud: AzureMLPlatform) -> None:
    handle = backend_on(cloud).submit(job(), SETTINGS)
    again = JobHandle.loads(str(handle))
    assert again == handle
    assert backend_on(cloud).wait(again, poll_interval=0.01).state is JobState.SUCCEEDED


def test_az_yaml_is_derived_from_the_request_alone() -> None:
    request = render(job(), environment="azureml:my-env:3", job_tier="standard", priority="low")
    round_tripped = Request.from_dict(json.loads(request.to_json()))
    text = create_backend("azureml", environ={}).format(round_tripped, "az-yaml")
    data = yaml.safe_load(io.StringIO(text))
    assert data["environment"] == "azureml:my-env:3"
    assert data["compute"] == "azureml:gpu-cluster"
    assert data["queue_settings"] == {"job_tier": "standard", "priority": "low"}
    assert data["limits"] == {"timeout": 7200}


# -- code: a code asset, as `command(code=DIR)` makes it -----------------------------------------------------
def code_folder(root: Path) -> Path:
    """A small project: two modules, data and bytecode its .gitignore leaves out, an .amlignore'd file."""
    folder = root / "project"
    (folder / "pkg").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "train.py").write_text("import pkg.model\nprint('trained')\n")
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "model.py").write_text("WIDTH = 4\n")
    (folder / "pkg" / "model.pyc").write_bytes(b"\x00bytecode")
    (folder / "data" / "big.bin").write_bytes(b"\x01" * 4096)
    (folder / ".gitignore").write_text("data/\n*.pyc\n")
    return folder


def code_job(folder: Path, **changes: Any) -> TrainingJob:
    spec = job_from_dict(merge(BASE_JOB, {"code": folder.name, "image": None, "environment": "pytorch", **changes}))
    return spec.located(folder.parent)


def test_code_renders_the_sdks_code_asset_calls_and_runs_from_the_snapshot(tmp_path: Path) -> None:
    from crosstrain import packaging
    from crosstrain.backends.azureml.wire import code_asset_name

    folder = code_folder(tmp_path)
    request = render(code_job(folder))
    bundle = packaging.for_job(code_job(folder), ignore_files=AML_IGNORE_FILES)
    assert bundle is not None
    assert request.code == bundle.ref
    name = code_asset_name(bundle)
    versions = f"https://management.azure.com{ARM_WS}/codes/{name}/versions"
    assert [(c.method, c.url.split("?")[0]) for c in request.calls] == [
        ("GET", request.create.url.split("?")[0]),
        ("GET", versions),
        ("POST", f"{versions}/1/startPendingUpload"),
        ("PUT", f"{SAS_CONTAINER}/{name}/"),
        ("PUT", f"{versions}/1"),
        ("PUT", request.create.url.split("?")[0]),
    ]
    assert request.calls[1].url.endswith(f"&hash={code_content_hash(bundle.files)}&hashVersion=202208")
    uploaded = [b["name"] for b in request.calls[3].body["blobs"]]
    assert uploaded == [f"{name}/{f.path}" for f in bundle.files]
    assert f"{name}/crosstrain_code/src/train.py" in uploaded
    assert not any("data/" in b or b.endswith(".pyc") for b in uploaded)  # .gitignore applied
    assert f"{name}/crosstrain_code/src/.gitignore" in uploaded  # the ignore file itself ships, as with the SDK
    props = body(request)
    assert props["codeId"] == f"{ARM_WS}/codes/{name}/versions/1"
    assert props["environmentId"] == "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"
    assert shlex.split(props["command"]) == [
        "python",
        "-m",
        "crosstrain_code",
        "--",
        "python",
        "-m",
        "train",
        "--epochs",
        "2",
    ]
    # the content is part of the fingerprint: a changed file is a different request
    (folder / "pkg" / "model.py").write_text("WIDTH = 8\n")
    assert render(code_job(folder)).fingerprint != request.fingerprint


def test_amlignore_adds_to_gitignore_unlike_the_sdk(tmp_path: Path) -> None:
    """azure-ai-ml reads .amlignore instead of .gitignore; here it applies after git's rules: it leaves more out,
    and only its own `!pattern` brings back what .gitignore leaves out."""
    folder = code_folder(tmp_path)
    (folder / "notes.md").write_text("draft\n")
    (folder / ".amlignore").write_text("*.md\n!data/\n")
    blobs = [b["name"] for b in render(code_job(folder)).calls[3].body["blobs"]]
    assert any(b.endswith("crosstrain_code/src/data/big.bin") for b in blobs)
    assert not any(b.endswith((".pyc", ".md")) for b in blobs)


def test_requirements_are_installed_by_the_bootstrap(tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    request = render(code_job(folder, requirements=["einops==0.8.0"]))
    assert shlex.split(body(request)["command"])[:5] == ["python", "-m", "crosstrain_code", "--install", "--"]
    assert any("pip-installs einops==0.8.0" in note for note in request.notes)
    blobs = {b["name"].split("/", 1)[1]: b for b in request.calls[3].body["blobs"]}
    assert blobs["crosstrain_code/requirements.txt"]["size"] == len("einops==0.8.0\n")


def test_per_node_launcher_runs_inside_the_bootstrap(tmp_path: Path) -> None:
    request = render(code_job(code_folder(tmp_path), launch={"mode": "per-node"}))
    words = shlex.split(body(request)["command"])
    assert words[:8] == [
        "python",
        "-m",
        "crosstrain_code",
        "--",
        "python",
        "-m",
        "crosstrain.launch",
        "--nproc-per-node",
    ]


def test_an_unshippable_folder_is_refused_at_render(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "escape").symlink_to("/etc")
    with pytest.raises(SpecError) as refused:
        render(code_job(folder))
    assert any("leaves the code folder" in p.message for p in refused.value.problems)


@pytest.mark.parametrize(
    ("reference", "environment_id"),
    [
        ("azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest", "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"),
        ("AzureML-acpt-pytorch-2.8-cuda12.6@latest", "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"),
        ("my-env:3", f"{ARM_WS}/environments/my-env/versions/3"),
        ("azureml:my-env:3", f"{ARM_WS}/environments/my-env/versions/3"),
        (
            "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/3",
            "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/versions/3",
        ),
        (
            "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/labels/latest",
            "azureml://registries/azureml/environments/acpt-pytorch-2.8-cuda12.6/labels/latest",
        ),
    ],
)
def test_environment_references_go_on_as_the_sdk_passes_them(
    reference: str, environment_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from azure.ai.ml import PyTorchDistribution, command

    request = render(job(), environment=reference)
    assert body(request)["environmentId"] == environment_id
    assert [c.method for c in request.calls] == ["GET", "PUT"]  # no environment call: the service resolves labels
    sdk_job = command(
        command="python -m train --epochs 2",
        environment=reference,
        compute="gpu-cluster",
        distribution=PyTorchDistribution(process_count_per_instance=4),
    )
    ((method, _, sent),) = sdk_calls(sdk_job, tmp_path, monkeypatch)
    assert (method, sent["properties"]["environmentId"]) == ("PUT", environment_id)
    # the az-yaml form names it so that az ml job create sends the same
    assert yaml.safe_load(create_backend("azureml", environ={}).format(request, "az-yaml"))["environment"] in (
        reference if reference.startswith("azureml:") else f"azureml:{reference}",
        environment_id,
    )


@pytest.mark.parametrize("version", ["pytorch", "pytorch:2.8"])
def test_the_portable_environment_is_the_curated_one(version: str) -> None:
    request = render(job(image=None, environment=version))
    assert body(request)["environmentId"] == "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"
    with pytest.raises(Unsupported) as refused:
        render(job(image=None, environment="pytorch:1.13"))
    assert "pytorch:2.8" in refused.value.problems[0].message


def _sdk_code_calls(
    staged: Path, request: Request, service: AzureMLService, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    from azure.ai.ml import MLClient, PyTorchDistribution, command

    monkeypatch.chdir(staged.parent)  # outside a git repository: no git properties on the job
    transport = AzureMLTransport(service)
    ml = MLClient(FakeCredential(), SUBSCRIPTION, "my-rg", "my-ws", transport=transport)
    props = body(request)
    sdk_job = command(
        name=request.identity,
        code=str(staged),
        command=props["command"],
        environment=props["environmentId"],
        compute="gpu-cluster",
        distribution=PyTorchDistribution(process_count_per_instance=4),
    )
    ml.jobs.create_or_update(sdk_job)
    return list(transport.requests)


def test_the_code_calls_are_the_sdks(azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """azure-ai-ml's own `create_or_update(command(code=<the staged bundle>))` against the fake workspace and
    Azurite, compared with the render. Inherent differences: the SDK names the code asset with a random UUID
    (crosstrain: `crosstrain-<bundle digest>`, so a render is deterministic), its blob prefix is the folder's
    basename (staged here under the asset's name, so the blob names agree), and the container URLs come from
    startPendingUpload's answer (placeholders in the render)."""
    from crosstrain import packaging
    from crosstrain.backends.azureml.wire import code_asset_name

    folder = code_folder(tmp_path)
    request = render(code_job(folder))
    bundle = packaging.for_job(code_job(folder), ignore_files=AML_IGNORE_FILES)
    assert bundle is not None
    name = code_asset_name(bundle)
    bundle.stage(tmp_path / "staging" / name)
    service = AzureMLService(blob_endpoint=azurite_url, container="sdk-parity")
    sent = _sdk_code_calls(tmp_path / "staging" / name, request, service, monkeypatch)
    random_name = urlsplit(sent[0].url).path.split("/codes/")[1].split("/")[0]

    def ours(url: str) -> str:
        return url.replace(random_name, name)

    lookup, start, register, put = sent
    assert (lookup.method, ours(lookup.url)) == ("GET", request.calls[1].url)  # the same content hash
    assert (start.method, ours(start.url), start.body) == ("POST", request.calls[2].url, request.calls[2].body)
    container = f"{azurite_url}/sdk-parity"
    expected = json.loads(json.dumps(request.calls[4].body).replace(BLOB_CONTAINER, container))
    assert (register.method, ours(register.url), register.body) == ("PUT", request.calls[4].url, expected)
    assert ours(put.body["properties"]["codeId"]) == body(request)["codeId"]
    blobs = sorted(b.name for b in blob_container(azurite_url, "sdk-parity").list_blobs())
    assert blobs == sorted(b["name"] for b in request.calls[3].body["blobs"])


def _code_backend(service: AzureMLService) -> AzureMLBackend:
    return AzureMLBackend(
        transport=AzureMLTransport(service),
        credential=FakeCredential(),
        retry=RetryPolicy(sleep=lambda s: None, call_timeout=30),
        environ={},
    )


def test_submit_uploads_once_and_an_unchanged_folder_never_again(azurite_url: str, tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="submits")
    backend = _code_backend(service)
    first = backend.submit(code_job(folder), SETTINGS)
    operations = [service.operation(c) for c in service.received]
    assert operations == ["find", "code-list", "start-upload", "code", "create"]
    container = blob_container(azurite_url, "submits")
    listed = {b.name: b for b in container.list_blobs(include=["metadata"])}
    request = render(code_job(folder))
    name = request.calls[3].url.removeprefix(SAS_CONTAINER + "/").rstrip("/")
    # exactly the local files minus the ignored ones, and crosstrain's runtime beside them
    user = {
        k.removeprefix(f"{name}/crosstrain_code/src/"): container.download_blob(k).readall()
        for k in listed
        if k.startswith(f"{name}/crosstrain_code/src/")
    }
    assert user == {
        ".gitignore": b"data/\n*.pyc\n",
        "train.py": b"import pkg.model\nprint('trained')\n",
        "pkg/__init__.py": b"",
        "pkg/model.py": b"WIDTH = 4\n",
    }
    runtime = {k.removeprefix(f"{name}/crosstrain_code/") for k in listed if "/src/" not in k}
    assert {"__main__.py", "__init__.py", "requirements.txt", "crosstrain/launch.py"} <= runtime
    assert listed[f"{name}/crosstrain_code/__init__.py"].metadata == {
        "upload_status": "completed",
        "name": name,
        "version": "1",
    }
    stored = service.resources[body(request)["codeId"]]
    assert stored["properties"]["codeUri"] == f"{azurite_url}/submits/{name}"
    etags = {k: b.etag for k, b in listed.items()}

    # the same folder again, under a new run: found by its hash, nothing uploaded, no code version PUT
    service.received.clear()
    second = backend.submit(code_job(folder, run_id="again"), SETTINGS)
    assert second.job_id != first.job_id
    assert [service.operation(c) for c in service.received] == ["find", "code-list", "create"]
    assert {b.name: b.etag for b in container.list_blobs()} == etags
    assert service.resources[service.job(second.job_id)]["properties"]["codeId"] == body(request)["codeId"]

    # the same request again: the job is adopted, nothing else is sent
    service.received.clear()
    assert backend.submit(code_job(folder), SETTINGS).adopted
    assert [service.operation(c) for c in service.received] == ["find"]


def test_content_uploaded_by_the_sdk_is_reused(
    azurite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crosstrain import packaging

    folder = code_folder(tmp_path)
    bundle = packaging.for_job(code_job(folder), ignore_files=AML_IGNORE_FILES)
    assert bundle is not None
    bundle.stage(tmp_path / "staging" / "anything")
    service = AzureMLService(blob_endpoint=azurite_url, container="reuse")
    sdk = _sdk_code_calls(tmp_path / "staging" / "anything", render(code_job(folder)), service, monkeypatch)
    sdk_code_id = sdk[-1].body["properties"]["codeId"]
    service.received.clear()
    handle = _code_backend(service).submit(code_job(folder, run_id="mine"), SETTINGS)
    assert [service.operation(c) for c in service.received] == ["find", "code-list", "create"]
    assert service.resources[service.job(handle.job_id)]["properties"]["codeId"] == sdk_code_id


def test_a_folder_changed_after_render_is_refused_before_anything_is_uploaded(azurite_url: str, tmp_path: Path) -> None:
    folder = code_folder(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="changed")
    backend = _code_backend(service)
    request = backend.render(code_job(folder), SETTINGS)
    (folder / "train.py").write_text("print('edited')\n")
    with pytest.raises(SpecError, match="changed since the request was rendered"):
        backend.send(request)
    assert [service.operation(c) for c in service.received] == ["find"]


# -- local emulation: the rendered node command, from the staged bundle, in a Python without crosstrain ------
def _run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`crosstrain ARGS` with this checkout's crosstrain, and no PYTHONPATH for the nodes to inherit: they import
    crosstrain only from the shipped bundle."""
    from crosstrain.backends.local import inherited_environment

    env = {k: v for k, v in inherited_environment(os.environ).items() if k != "PYTHONPATH"}
    boot = f"import sys; sys.path[:0] = [{str(ROOT / 'src')!r}]; from crosstrain.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", boot, *args], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )


def training_job_file(tmp_path: Path, name: str, settings: dict[str, Any]) -> Path:
    """A two-node job file that trains the quickstart's model briefly from `tmp_path/code` (made here, with its
    `train.py`), one process per node, on Azure ML with `settings`."""
    code = tmp_path / "code"
    code.mkdir()
    shutil.copy(ROOT / "examples" / "ddp-quickstart" / "train.py", code / "train.py")
    job_file = tmp_path / "job.yaml"
    job = {
        "name": name,
        "code": "./code",
        "environment": "pytorch",
        "command": "python train.py",
        "args": ["--epochs", "1", "--samples", "512"],
        "workers": {"replicas": 1},
        "launch": {"processes_per_node": 1},
        "targets": {"azureml": dict(settings)},
    }
    job_file.write_text(yaml.safe_dump(job))
    return job_file


@pytest.mark.parametrize("emulate", ["azureml", "azureml-mpi"])
def test_a_job_with_code_trains_under_emulation_in_a_stock_python(emulate: str, tmp_path: Path, stock: Path) -> None:
    job_file = training_job_file(tmp_path, "code-quickstart", SETTINGS)
    (tmp_path / "code" / "notes.tmp").write_text("left out\n")
    (tmp_path / "code" / ".amlignore").write_text("*.tmp\n")
    local = create_backend("local", environ={}).render(load_job(job_file), {"emulate": emulate})
    assert local.code is not None
    assert local.code.ignore_files == AML_IGNORE_FILES  # stages what Azure ML receives: notes.tmp left out
    assert local.code.files == 2  # train.py and .amlignore
    done = _run_cli("run", str(job_file), "--local", "--emulate", emulate, "--set", f"python={stock}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    assert len(re.findall(r"rank (\d)/2 done", done.stderr)) == 2, done.stderr[-3000:]


def test_the_seed_code_example_renders_the_same_from_anywhere(tmp_path: Path) -> None:
    example = ROOT / "examples" / "azureml-seed-code" / "job.yaml"
    outputs = []
    for cwd, path in (
        (ROOT, "examples/azureml-seed-code/job.yaml"),
        (example.parent, "job.yaml"),
        (tmp_path, str(example)),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "crosstrain.cli", "render", path, "-t", "azureml"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    request = Request.from_dict(json.loads(outputs[0]))
    props = body(request)
    assert (props["resources"]["instanceCount"], props["distribution"]["processCountPerInstance"]) == (2, 4)
    assert props["environmentId"] == "azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest"
    assert shlex.split(props["command"]) == [
        "python",
        "-m",
        "crosstrain_code",
        "--",
        "python",
        "train.py",
        "--epochs",
        "50",
    ]
    assert request.code is not None
    assert request.code.folder == str(example.parent / "src")


def test_the_seed_code_example_runs_under_azureml_emulation(tmp_path: Path, stock: Path) -> None:
    """The example as it is, but one epoch and small data (its 2 x 4 processes on this machine's CPUs)."""
    example = ROOT / "examples" / "azureml-seed-code"
    shutil.copytree(example, tmp_path / "example")
    job_file = tmp_path / "example" / "job.yaml"
    spec = yaml.safe_load(job_file.read_text())
    spec["args"] = ["--epochs", "1", "--samples", "256"]
    job_file.write_text(yaml.safe_dump(spec))
    done = _run_cli("run", str(job_file), "--local", "--emulate", "azureml", "--set", f"python={stock}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(re.findall(r"rank (\d)/8 done", done.stderr)) == 8, done.stderr[-3000:]


def test_a_request_whose_code_calls_name_other_content_is_refused(azurite_url: str, tmp_path: Path) -> None:
    import dataclasses

    folder = code_folder(tmp_path)
    service = AzureMLService(blob_endpoint=azurite_url, container="tampered")
    backend = _code_backend(service)
    request = backend.render(code_job(folder), SETTINGS)
    calls = list(request.calls)
    calls[3] = dataclasses.replace(calls[3], url=f"{SAS_CONTAINER}/crosstrain-elsewhere/")
    with pytest.raises(SubmitError, match="do not name the content"):
        backend.send(dataclasses.replace(request, calls=tuple(calls)))
    assert [service.operation(c) for c in service.received] == ["find"]


def test_az_yaml_names_the_code_asset(tmp_path: Path) -> None:
    from azure.ai.ml import load_job as sdk_load_job
    from azure.ai.ml.entities import Command

    request = render(code_job(code_folder(tmp_path)))
    text = create_backend("azureml", environ={}).format(request, "az-yaml")
    name = body(request)["codeId"].split("/codes/")[1].split("/")[0]
    assert yaml.safe_load(text)["code"] == f"azureml:{name}:1"
    job_file = tmp_path / "job.yml"
    job_file.write_text(text)
    loaded = sdk_load_job(source=job_file)
    assert isinstance(loaded, Command)
    assert loaded._validate().passed


def test_vm_sizes_in_any_case_render_as_azure_spells_them() -> None:
    request = render(job(primary={"machine": "STANDARD_NC4AS_T4_V3"}, workers={"replicas": 0}), compute=None)
    assert body(request)["resources"]["instanceType"] == "Standard_NC4as_T4_v3"


def test_a_refused_machine_is_the_only_problem() -> None:
    """Not also "the job names no machine": it named one, and that one was refused."""
    with pytest.raises(Unsupported) as caught:
        render(job(primary={"machine": "BASIC_GPU"}), compute=None)
    assert [p.path for p in caught.value.problems] == ["primary.machine.type"]


def test_a_conda_file_on_the_image_is_the_environment_azure_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """targets.azureml.conda_file: the anonymous environment (its version the SDK's digest of the image and the
    file) and the job's create call are what azure-ai-ml sends for `Environment(image=..., conda_file=...)`."""
    from azure.ai.ml import PyTorchDistribution, command
    from azure.ai.ml.entities import Environment

    conda = "name: train\nchannels: [conda-forge]\ndependencies:\n  - python=3.11\n  - pip:\n      - torch==2.4.0\n"
    (tmp_path / "conda.yml").write_text(conda)
    monkeypatch.chdir(tmp_path)
    spec = job()
    request = render(spec, conda_file="conda.yml")
    environment = Environment(image=BASE_JOB["image"], conda_file=str(tmp_path / "conda.yml"))
    by_hand = command(
        name=request.identity,
        display_name=spec.name,
        experiment_name=spec.name,
        properties={FINGERPRINT_PROPERTY: request.fingerprint},
        command="python -m train --epochs 2",
        environment=environment,
        environment_variables={"NCCL_DEBUG": "INFO"},
        compute="gpu-cluster",
        instance_count=3,
        distribution=PyTorchDistribution(process_count_per_instance=4),
        tags={"team": "ml"},
        timeout=7200,
    )
    assert sdk_calls(by_hand, tmp_path, monkeypatch) == create_calls(request)
    from azure.ai.ml import load_job as sdk_load_job

    job_file = tmp_path / "job.yml"  # the az-yaml form builds the same environment
    job_file.write_text(create_backend("azureml", environ={}).format(request, "az-yaml"))
    assert sdk_calls(sdk_load_job(source=job_file), tmp_path, monkeypatch) == create_calls(request)
    plain = render(spec)
    assert plain.create.body["properties"]["environmentId"] != request.create.body["properties"]["environmentId"]


def test_a_conda_file_needs_an_image_to_build_on() -> None:
    with pytest.raises(SpecError, match="builds a conda file on the job's image"):
        render(job(image=None, environment="pytorch"), conda_file="conda.yml")
