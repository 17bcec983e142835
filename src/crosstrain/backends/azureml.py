"""`azureml`: Azure Machine Learning (v2) command jobs, with PyTorch, MPI or TensorFlow distribution.

Render builds the calls submit makes: a GET of the job by its name (the render-time identity), then the ARM
calls that `MLClient.jobs.create_or_update` makes for the same job (azure-ai-ml 1.35.2): an anonymous
environment registration when the job names an image, and the job PUT, which records the request's
fingerprint in the job's `properties`. The job PUT is create-OR-UPDATE, so submit never sends it blind: the GET
comes first, and a job found under the name is adopted if its fingerprint is this request's and refused
(`IdentityConflict`) if not; only a 404 leads to the PUT. Submit sends exactly those calls through the
MLClient's own authenticated ARM pipeline (via `crosstrain.adaptors.azure`, which maps azure-core's errors);
status, cancel and logs use the public `MLClient.jobs` operations. Sources: ../shared/reference/azure.md
(sections 1-5, 8, 9).

Azure runs one image, one command and one VM size on every node; `instance_count` is the number of nodes and
`process_count_per_instance` is per node (the SDK v1 `PyTorchConfiguration.process_count` was the total; the
`distributed_job_config` setting accepts the v1 forms and converts them).

The ARM token goes to management.azure.com only: a handle or a request from a file is checked, before any
credential is asked for a token, for that host and for the subscription, resource group and workspace this
machine configures (where it configures them).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shlex
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from crosstrain import catalog, data, packaging, secrets
from crosstrain.adaptors import azure
from crosstrain.backends.base import (
    FINGERPRINT_WHY,
    NODES_WHY,
    Backend,
    Capabilities,
    HttpCall,
    Ids,
    JobHandle,
    JobState,
    JobStatus,
    JobSummary,
    Request,
    bundle_command,
    launcher_command,
    origin_of,
    shown,
)
from crosstrain.environments import Runtime, Runtimes
from crosstrain.errors import CrosstrainError, Problem, SubmitError, Unsupported
from crosstrain.failures import last_lines, summary
from crosstrain.launch import torchrun_options
from crosstrain.settings import TargetSettings, env_vars, resolve_settings, setting
from crosstrain.uploads import UploadRefused

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.core.pipeline.transport import HttpTransport

    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import TrainingJob

#: The api-version azure-ai-ml 1.35.2 uses for command-job creates (azure.md 3, verified on the wire).
API_VERSION = "2025-01-01-preview"
#: The api-version of its anonymous-environment PUT.
ENVIRONMENT_API_VERSION = "2023-04-01-preview"
ARM = "https://management.azure.com"
#: The name azure-ai-ml gives environments created from an image; the version is a digest of the image.
ANONYMOUS_ENVIRONMENT = "CliV2AnonymousEnvironment"
CLI_SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
#: The job property that records the request's fingerprint (`Job.properties` round-trips it).
FINGERPRINT_PROPERTY = "crosstrain.fingerprint"

# -- code assets: what `MLClient.jobs.create_or_update(command(code=DIR))` does (azure-ai-ml 1.35.2,
# operations/_code_operations.py, _utils/_asset_utils.py; verified against Azurite in the tests) ---------------
#: The api-version of the code-asset calls (list by hash, startPendingUpload, the version PUT).
CODE_API_VERSION = "2023-04-01"
#: `_asset_utils.get_content_hash_version()`: the content hash the service indexes code versions by.
CODE_HASH_VERSION = 202208
#: Ignore files, the first found in the code folder's root wins: `.amlignore` before `.gitignore` as azure-ai-ml
#: reads them (`get_ignore_file`), crosstrain's own `.crosstrainignore` between the two.
AML_IGNORE_FILES = (".amlignore", ".crosstrainignore", ".gitignore")
#: What the blob upload call's URL starts with: the container SAS URL that only startPendingUpload's answer
#: gives (`blobReferenceForConsumption.credential.sasUri`), filled in by submit.
SAS_CONTAINER = "{sasUri}"
#: What the code version's `codeUri` starts with: the container URL of the same answer (`blobUri`).
BLOB_CONTAINER = "{blobUri}"

# -- platform-managed environments ------------------------------------------------------------------------
#: `environment: pytorch[:X.Y]` on Azure ML: curated environments, passed with the `@latest` label the way the
#: docs and azure-ai-ml pass them (the service resolves the label). The CPU flavour is the same environment:
#: Azure documents no curated CPU PyTorch environment in reach, and the ACPT image's CUDA build of torch runs
#: on a CPU VM (CUDA stays unused) -- UNVERIFIED on Azure itself.
RUNTIMES = Runtimes(
    "Azure ML",
    (
        Runtime(
            "2.8",
            gpu="azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest",
            cpu="azureml:AzureML-acpt-pytorch-2.8-cuda12.6@latest",
            source="https://learn.microsoft.com/azure/machine-learning/how-to-train-pytorch "
            "(curated environment AzureML-acpt-pytorch-2.8-cuda12.6, used there with @latest)",
        ),
    ),
    "targets.azureml.environment",
)

#: Azure ML job statuses (`JobStatus` of the ARM API) -> the common state.
STATE_MAP: Mapping[str, JobState] = {
    "NotStarted": JobState.QUEUED,
    "Starting": JobState.QUEUED,
    "Provisioning": JobState.QUEUED,
    "Preparing": JobState.QUEUED,
    "Queued": JobState.QUEUED,
    "Paused": JobState.QUEUED,
    "Running": JobState.RUNNING,
    "Finalizing": JobState.RUNNING,
    "CancelRequested": JobState.CANCELLING,
    "Completed": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "NotResponding": JobState.FAILED,  # terminal for the SDK: the run stopped reporting
    "Canceled": JobState.CANCELLED,
    "Unknown": JobState.UNKNOWN,
}

_PRIORITY = {"low": 1, "medium": 2, "high": 3}
_JOB_TIERS = {"spot": "Spot", "basic": "Basic", "standard": "Standard", "premium": "Premium"}
_SHM_SIZE = r"^\d+[bkmg]$"
_NAMED_ENVIRONMENT = re.compile(r"(?P<name>[A-Za-z0-9_.-]+):(?P<version>[A-Za-z0-9_.-]+)")
_LABELLED_ENVIRONMENT = re.compile(r"(?P<name>[A-Za-z0-9_.-]+)@latest")
_REGISTRY_ENVIRONMENT = re.compile(
    r"azureml://registries/[A-Za-z0-9_.-]+/environments/[A-Za-z0-9_.-]+/(?:versions|labels)/[A-Za-z0-9_.-]+"
)
_ARM_ENVIRONMENT = re.compile(
    r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.MachineLearningServices/.+"
)
_SEGMENT = re.compile(r"(?!\.{1,2}$)[^/?#%\s]+")
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


# -- the SDK v1 distribution forms -------------------------------------------------------------------------
class _V1(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PyTorchConfiguration(_V1):
    """SDK v1 `PyTorchConfiguration`: `process_count` is the TOTAL number of processes (default: node_count)."""

    type: Literal["PyTorchConfiguration"] = "PyTorchConfiguration"
    process_count: int | None = Field(None, ge=1, description="Total processes over all nodes.")
    node_count: int = Field(1, ge=1, le=10000)
    communication_backend: Literal["Nccl", "Gloo", "nccl", "gloo"] = Field(
        "Nccl", description="Accepted for compatibility; v2 has no such field (choose it in code)."
    )


class MpiConfiguration(_V1):
    """SDK v1 `MpiConfiguration`: already per node."""

    type: Literal["MpiConfiguration"] = "MpiConfiguration"
    process_count_per_node: int = Field(1, ge=1, le=128)
    node_count: int = Field(1, ge=1, le=10000)


class TensorflowConfiguration(_V1):
    """SDK v1 `TensorflowConfiguration`: one worker per node."""

    type: Literal["TensorflowConfiguration"] = "TensorflowConfiguration"
    worker_count: int = Field(1, ge=1, le=10000)
    parameter_server_count: int = Field(0, ge=0, le=0, description="Parameter servers are not supported.")


_V1_CALL = re.compile(r"\s*(?P<kind>PyTorchConfiguration|MpiConfiguration|TensorflowConfiguration)\((?P<args>.*)\)\s*")


def _parse_v1_call(value: Any) -> Any:
    """`"PyTorchConfiguration(process_count=8, node_count=2)"`, as written in SDK v1 code, -> a mapping."""
    if not isinstance(value, str):
        return value
    fix = (
        "write the SDK v1 call with keyword arguments, e.g. PyTorchConfiguration(process_count=8, node_count=2) "
        "or MpiConfiguration(process_count_per_node=4, node_count=2)"
    )
    match = _V1_CALL.fullmatch(value)
    if not match:
        raise PydanticCustomError("crosstrain", "{value} is not an SDK v1 distribution", {"value": value, "fix": fix})
    out: dict[str, Any] = {"type": match["kind"]}
    for part in filter(None, (p.strip() for p in match["args"].split(","))):
        key, sep, raw = part.partition("=")
        if not sep:
            raise PydanticCustomError("crosstrain", "{part} is a positional argument", {"part": part, "fix": fix})
        raw = raw.strip().strip("'\"")
        out[key.strip()] = int(raw) if raw.isdigit() else raw
    return out


V1Distribution = Annotated[
    Annotated[PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration, Field(discriminator="type")],
    BeforeValidator(
        _parse_v1_call, json_schema_input_type=str | PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration
    ),
]


class AzureMLSettings(TargetSettings):
    subscription_id: str = setting(description="Azure subscription id.", env=("AZURE_SUBSCRIPTION_ID",))
    resource_group: str = setting(
        description="Resource group of the workspace.", env=("AZURE_RESOURCE_GROUP", "AZUREML_ARM_RESOURCEGROUP")
    )
    workspace: str = setting(
        description="Azure ML workspace name.", env=("AZUREML_WORKSPACE_NAME", "AZUREML_ARM_WORKSPACE_NAME")
    )
    compute: str | None = setting(
        None,
        description="Compute cluster name (its VM size is the cluster's). Omit for serverless compute, "
        "where the job's machine is the VM size.",
    )
    experiment: str | None = setting(
        None, description="Experiment name; defaults to the job name (the SDK would use the current directory)."
    )
    environment: str | None = setting(
        None,
        description="An environment: `azureml:<name>:<version>`, `azureml:<name>@latest` (the `azureml:` prefix "
        "optional), a registry URI (`azureml://registries/<registry>/environments/<name>/versions/<v>` or "
        "`.../labels/latest`) or an ARM id; passed on as azure-ai-ml passes it. Default: the job's "
        "`environment` from crosstrain's table, else its image, registered as an anonymous environment the way "
        "azure-ai-ml does.",
    )
    shm_size: str | None = Field(
        None, pattern=_SHM_SIZE, description="Shared memory of each container, e.g. 16g (Azure's default is 2g)."
    )
    docker_args: str | None = Field(None, description="Extra `docker run` arguments, e.g. --ipc=host.")
    job_tier: Literal["spot", "basic", "standard", "premium"] | None = Field(
        None, description="Queue tier (serverless); `scheduling.spot: true` means spot."
    )
    priority: Literal["low", "medium", "high"] | None = Field(None, description="Queue priority.")
    distributed_job_config: V1Distribution | None = Field(
        None,
        description="SDK v1 shorthand, e.g. `PyTorchConfiguration(process_count=8, node_count=2)` (process_count "
        "is the total), `MpiConfiguration(process_count_per_node=4, node_count=2)`, "
        "`TensorflowConfiguration(worker_count=2)`; converted to nodes, processes per node and framework.",
    )

    @field_validator("subscription_id", "resource_group", "workspace")
    @classmethod
    def _segment(cls, value: str) -> str:
        # Each names one segment of the ARM path that the token is sent to.
        if not _SEGMENT.fullmatch(value):
            raise ValueError("is not an Azure resource name; give the name alone, without '/', '?', '#', '%' or spaces")
        return value


# -- the plan: what the job means on Azure ----------------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    nodes: int
    processes_per_node: int  # what Azure starts on each node
    launcher_processes: int | None  # per-node mode: what crosstrain's launcher starts on each node
    framework: str
    machine: catalog.ResolvedMachine
    command: list[str]
    image: str | None
    env: dict[str, str]
    #: `properties.environmentId`: the named environment, the curated one picked, or the image's anonymous one.
    environment_id: str
    #: The image registered as an anonymous environment first (as azure-ai-ml does); None when one is named.
    registers_image: str | None
    environment_note: str | None


def _plan(job: TrainingJob, settings: AzureMLSettings) -> tuple[_Plan | None, list[Problem]]:
    problems: list[Problem] = []
    pool = job.pools()[0]
    machine = catalog.ResolvedMachine(None)
    if pool.machine:
        accel = pool.machine.accelerator
        try:
            machine = catalog.resolve(
                "azureml",
                machine_type=pool.machine.type,
                gpu=accel.type if accel else None,
                gpu_count=accel.count if accel else None,
                path=pool.machine_path,
            )
        except catalog.CatalogError as exc:
            problems.append(exc.problem)
    refused = bool(problems)  # a machine named and refused: "names no machine" would mislead
    nodes, framework = job.nodes, str(job.launch.framework)
    per_node = job.processes_per_node(machine.gpu_count)
    config = settings.distributed_job_config
    if config is not None:
        nodes, per_node, framework, conflicts = _apply_v1(job, config, machine.gpu_count)
        problems += conflicts
    launcher = None
    if job.launch.mode == "per-node":
        launcher = job.processes_per_node(machine.gpu_count)
        if config is not None and per_node != 1:
            problems.append(
                Problem(
                    "targets.azureml.distributed_job_config",
                    f"launch.mode per-node has Azure start one process per node, but the v1 config asks for "
                    f"{per_node} per node",
                    "omit process_count (or set it to node_count); crosstrain's launcher starts "
                    "launch.processes_per_node (default: the GPUs) on each node",
                )
            )
        per_node = 1
    if framework == "tensorflow":
        if job.launch.mode == "per-node":
            problems.append(
                Problem(
                    "launch.mode",
                    "Azure ML's TensorFlow distribution sets TF_CONFIG for one worker per node; there is no "
                    "per-node launcher for it",
                    "use launch.mode auto",
                )
            )
        if job.launch.processes_per_node not in (None, 1):
            problems.append(
                Problem(
                    "launch.processes_per_node",
                    f"Azure ML's TensorFlow distribution runs one worker per node, not {job.launch.processes_per_node}",
                    "remove launch.processes_per_node; use tf.distribute to drive every GPU of a node",
                )
            )
        per_node = 1
    if machine.gpu_count and per_node > machine.gpu_count:
        problems.append(
            Problem(
                "launch.processes_per_node",
                f"{per_node} processes per node, but {machine.machine_type} has {machine.gpu_count} GPUs",
                f"use at most {machine.gpu_count} processes per node",
            )
        )
    if not settings.compute and not machine.machine_type and not refused:
        problems.append(
            Problem(
                "primary.machine",
                "serverless compute needs a VM size, and the job names no machine",
                "set primary.machine (e.g. `A100:8` or `Standard_ND96asr_v4`), or name a cluster with "
                "targets.azureml.compute",
            )
        )
    if not pool.command:
        problems.append(Problem("command", "an Azure ML command job needs a command", "set `command`"))
    elif launcher is None and per_node > 1 and torchrun_options(pool.command) is not None:
        problems.append(
            Problem(
                "command",
                f"Azure ML starts the {per_node} processes of each node itself ({framework} distribution), and "
                f"the command starts torchrun, which would start its own in each of them: {nodes * per_node} "
                "separate groups instead of one job (Azure's docs: no launcher commands of your own)",
                "use launch.mode: per-node (Azure starts one process per node, and crosstrain's launcher gives your "
                "torchrun the node count, node rank and rendezvous), or drop torchrun from the command",
            )
        )
    if not pool.image and not settings.environment and not job.environment:
        problems.append(
            Problem(
                "image",
                "Azure ML needs an environment for the job",
                "set `environment: pytorch` (a curated environment), `image`, or an environment in "
                "targets.azureml.environment (azureml:<name>:<version> or azureml:<name>@latest)",
            )
        )
    if settings.environment and environment_reference(settings.environment, "") is None:
        problems.append(
            Problem(
                "targets.azureml.environment",
                f"{settings.environment!r} is not an Azure ML environment reference",
                "write azureml:<name>:<version>, azureml:<name>@latest, a registry URI "
                "(azureml://registries/<registry>/environments/<name>/versions/<version>) or an ARM id",
            )
        )
    picked: str | Problem | None = None
    if job.environment and not settings.environment:
        picked = RUNTIMES.pick(job.environment, gpu=bool(machine.gpu_count) or not machine.machine_type)
        if isinstance(picked, Problem):
            problems.append(picked)
    if job.requirements is not None and job.code is None:
        problems.append(
            Problem(
                "requirements",
                "on Azure ML the requirements are installed by the code bundle's bootstrap, and the job ships no code",
                "set `code:` (the folder with the training code), or build an environment with the packages",
            )
        )
    if job.scheduling.spot and settings.job_tier not in (None, "spot"):
        problems.append(
            Problem(
                "targets.azureml.job_tier",
                f"scheduling.spot asks for spot capacity, but job_tier is {settings.job_tier}",
                "drop one of the two",
            )
        )
    problems += _unexpressible(job)
    if problems or not pool.command:
        return None, problems
    workspace = workspace_path(settings)
    named = environment_reference(settings.environment, workspace) if settings.environment else None
    registers_image = None
    if named is not None:
        environment_id, note = named, None
        if pool.image:
            note = f"image {pool.image} is not used: targets.azureml.environment names the environment"
    elif isinstance(picked, str):
        environment_id = picked
        note = f"environment {job.environment} is Azure ML's curated {picked} (the service resolves @latest)"
    elif pool.image:
        version = anonymous_environment_version(pool.image)
        environment_id = f"{workspace}/environments/{ANONYMOUS_ENVIRONMENT}/versions/{version}"
        registers_image, note = pool.image, None
    else:
        return None, problems  # refused above: no environment, no image
    plan = _Plan(
        nodes=nodes,
        processes_per_node=per_node,
        launcher_processes=launcher,
        framework=framework,
        machine=machine,
        command=[*pool.command, *pool.args],
        image=pool.image,
        env={**pool.env, **secrets.reference_env(pool)},  # a secret's reference, never its value
        environment_id=environment_id,
        registers_image=registers_image,
        environment_note=note,
    )
    return plan, []


def _apply_v1(
    job: TrainingJob, config: PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration, gpus: int
) -> tuple[int, int, str, list[Problem]]:
    """Nodes, processes Azure starts per node, and framework from a v1 config; conflicts with the spec."""
    path = "targets.azureml.distributed_job_config"
    problems: list[Problem] = []
    if isinstance(config, PyTorchConfiguration):
        nodes, framework = config.node_count, "pytorch"
        total = config.process_count or config.node_count
        if total % nodes:
            problems.append(
                Problem(
                    f"{path}.process_count",
                    f"{total} processes cannot be spread evenly over {nodes} nodes (process_count is the total)",
                    f"use a multiple of {nodes}, e.g. {nodes * max(gpus, 1)}",
                )
            )
        per_node = max(total // nodes, 1)
    elif isinstance(config, MpiConfiguration):
        nodes, per_node, framework = config.node_count, config.process_count_per_node, "mpi"
    else:
        nodes, per_node, framework = config.worker_count, 1, "tensorflow"
    if "workers" in job.model_fields_set and job.nodes != nodes:
        problems.append(
            Problem(
                path,
                f"the v1 config asks for {nodes} nodes, but the spec has {job.nodes} (primary + workers.replicas)",
                f"set workers.replicas: {nodes - 1}, or remove it and let the v1 config decide",
            )
        )
    explicit = job.launch.processes_per_node
    if explicit is not None and job.launch.mode != "per-node" and explicit != per_node:
        problems.append(
            Problem(
                path,
                f"the v1 config means {per_node} processes per node, but launch.processes_per_node is {explicit}",
                "remove one of the two",
            )
        )
    if "framework" in job.launch.model_fields_set and job.launch.framework != framework:
        problems.append(
            Problem(
                path,
                f"{config.type} is a {framework} distribution, but launch.framework is {job.launch.framework}",
                "remove one of the two",
            )
        )
    return nodes, per_node, framework, problems


def _unexpressible(job: TrainingJob) -> list[Problem]:
    """Spec features a command job has no field for: refused, never dropped."""
    problems = []
    if job.scheduling.max_wait is not None:
        problems.append(Problem("scheduling.max_wait", "Azure ML command jobs have no queueing deadline", "remove it"))
    if job.scheduling.max_restarts is not None:
        problems.append(
            Problem(
                "scheduling.max_restarts",
                "Azure ML command jobs have no restart count",
                "remove it, and resume from checkpoints in the training code",
            )
        )
    for pool in job.pools():
        if pool.boot_disk is not None:
            problems.append(
                Problem(
                    f"{pool.role}.boot_disk",
                    "Azure ML sizes the disk by the VM size; a job cannot choose it",
                    "remove boot_disk",
                )
            )
            break
    if job.network is not None:
        problems.append(
            Problem(
                "network",
                "an Azure ML job joins the virtual network of its compute or workspace, not one of its own",
                "remove `network`; put the compute cluster (or the workspace's managed network) in the VNet",
            )
        )
    if job.output_dir is not None:
        problems.append(
            Problem(
                "output_dir",
                "Azure ML writes a job's outputs to named outputs that the command references; a job has no "
                "output folder of its own",
                "replace output_dir with `outputs: {NAME: azureml://datastores/...}` and pass ${outputs.NAME} in "
                "the command",
            )
        )
    if job.identity is not None and _identity(job.identity) is None:
        problems.append(
            Problem(
                "identity",
                f"{job.identity!r} is not an Azure ML job identity crosstrain can render (a user identity needs "
                "the submitter's token at submit time)",
                "use `managed` (the compute's managed identity), a user-assigned identity's client id (a GUID), "
                "or `aml_token`",
            )
        )
    return problems


def _identity(value: str) -> dict[str, str] | None:
    if value.lower() == "managed":
        return {"identityType": "Managed"}
    if _GUID.fullmatch(value):
        return {"identityType": "Managed", "clientId": value}
    if value.lower() in ("aml_token", "amltoken"):
        return {"identityType": "AMLToken"}
    return None


# -- wire helpers ------------------------------------------------------------------------------------------
def workspace_path(settings: AzureMLSettings) -> str:
    return (
        f"/subscriptions/{settings.subscription_id}/resourceGroups/{settings.resource_group}"
        f"/providers/Microsoft.MachineLearningServices/workspaces/{settings.workspace}"
    )


def environment_reference(value: str, workspace: str) -> str | None:
    """`properties.environmentId` for an environment reference, as azure-ai-ml 1.35.2 writes it (verified with
    its recording transport in the tests): `[azureml:]NAME:VERSION` becomes the version's ARM id,
    `[azureml:]NAME@latest` goes on as `azureml:NAME@latest` (the service resolves the label; the SDK makes no
    call), registry URIs and ARM ids go on verbatim. None: not a reference."""
    if _ARM_ENVIRONMENT.fullmatch(value) or _REGISTRY_ENVIRONMENT.fullmatch(value):
        return value
    bare = value.removeprefix("azureml:")
    labelled = _LABELLED_ENVIRONMENT.fullmatch(bare)
    if labelled:
        return f"azureml:{labelled['name']}@latest"
    named = _NAMED_ENVIRONMENT.fullmatch(bare)
    if named:
        return f"{workspace}/environments/{named['name']}/versions/{named['version']}"
    return None


def code_content_hash(files: tuple[packaging.CodeFile, ...]) -> str:
    """azure-ai-ml's `_get_file_list_content_hash` (hash version 202208) of the uploaded folder: sha256 over the
    file count, then `#<relative path>#<size>` of each file sorted by lower-cased path, then every file's bytes
    in that order. Memoised by the files' own digests: the bytes are read once per content."""
    key = tuple((f.path, f.size, f.sha256) for f in files)
    cached = _CONTENT_HASHES.get(key)
    if cached is not None:
        return cached
    ordered = sorted(files, key=lambda f: f.path.lower())
    digest = hashlib.sha256(str(len(files)).encode())
    for file in ordered:
        digest.update(f"#{file.path}#".encode())
        digest.update(str(file.size).encode())
    for file in ordered:
        data = file.read()
        if len(data) != file.size:
            raise UploadRefused(
                Problem("code", f"{file.path} changed while it was read", "submit again once the folder is stable")
            )
        digest.update(data)
    if len(_CONTENT_HASHES) > 16:
        _CONTENT_HASHES.clear()
    _CONTENT_HASHES[key] = digest.hexdigest()
    return _CONTENT_HASHES[key]


_CONTENT_HASHES: dict[tuple[tuple[str, int, str], ...], str] = {}


def code_asset_name(bundle: packaging.Bundle) -> str:
    """The code asset's name: content-addressed (the SDK picks a random one), so a render is deterministic."""
    return f"crosstrain-{bundle.short}"


def anonymous_environment_version(image: str) -> str:
    """The version azure-ai-ml gives an image-only anonymous environment: sha256 of sha256 of the image."""
    return hashlib.sha256(hashlib.sha256(image.encode()).hexdigest().encode()).hexdigest()


def iso_duration(seconds: int) -> str:
    """Seconds as the ISO-8601 duration the SDK sends (isodate's form: P1DT1H1M1S, PT2H)."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = "".join(f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n)
    return f"P{f'{days}D' if days else ''}{'T' + clock if clock else ''}" if days or clock else "PT0S"


def seconds_of(duration: str) -> int:
    """The inverse of `iso_duration`, for the CLI YAML form."""
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", duration)
    if not match:
        raise ValueError(f"not an ISO-8601 duration: {duration!r}")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    return d * 86400 + h * 3600 + m * 60 + s


def _code_calls(bundle: packaging.Bundle, workspace: str, headers: dict[str, str]) -> tuple[str, list[HttpCall]]:
    """The code asset's ARM id and the calls that make it, in azure-ai-ml's order: list by content hash, and
    only on a miss startPendingUpload, the blobs, the code version."""
    name = code_asset_name(bundle)
    content_hash = code_content_hash(bundle.files)
    versions = f"{ARM}{workspace}/codes/{name}/versions"
    code_id = f"{workspace}/codes/{name}/versions/1"
    blobs = [{"name": f"{name}/{f.path}", "size": f.size, "sha256": f.sha256} for f in bundle.files]
    calls = [
        HttpCall(
            "GET",
            f"{versions}?api-version={CODE_API_VERSION}&hash={content_hash}&hashVersion={CODE_HASH_VERSION}",
            purpose="look for this content in the workspace (azure-ai-ml's content hash): on a hit nothing is "
            "uploaded and the three calls below are skipped; a hit under another name (an asset azure-ai-ml "
            "uploaded, with its random name) is reused: codeId becomes that version's id",
        ),
        HttpCall(
            "POST",
            f"{versions}/1/startPendingUpload?api-version={CODE_API_VERSION}",
            {"pendingUploadType": "TemporaryBlobReference"},
            headers,
            purpose="ask for a container to upload to: the answer's blobReferenceForConsumption holds blobUri and a "
            "container SAS URL (sasUri)",
        ),
        HttpCall(
            "PUT",
            f"{SAS_CONTAINER}/{name}/",
            {
                "description": f"{len(blobs)} blob PUTs (azure-storage-blob, with the SAS of the answer above, not "
                "the ARM token), one per file of the unpacked bundle, under this prefix; the first one carries "
                "azure-ai-ml's upload_status metadata",
                "hash_sha256": content_hash,
                "bytes": sum(f.size for f in bundle.files),
                "blobs": blobs,
            },
            purpose=f"upload the code: the URL starts with {SAS_CONTAINER}, the container SAS URL that only "
            "startPendingUpload's answer gives (filled in at submit)",
        ),
        HttpCall(
            "PUT",
            f"{versions}/1?api-version={CODE_API_VERSION}",
            {
                "properties": {
                    "codeUri": f"{BLOB_CONTAINER}/{name}",
                    "isAnonymous": True,
                    "properties": {"hash_sha256": content_hash, "hash_version": CODE_HASH_VERSION},
                }
            },
            headers,
            purpose=f"register the uploaded folder as code version {name}/1, indexed by its content hash "
            f"({BLOB_CONTAINER} is startPendingUpload's container URL, filled in at submit)",
        ),
    ]
    return code_id, calls


#: The job input and output types of `type:` (azure-ai-ml's AssetTypes).
_AZURE_DATA_TYPES = {"folder": "uri_folder", "file": "uri_file", "table": "mltable"}
#: The REST modes of `mode:`, per direction, as azure-ai-ml maps ro_mount, rw_mount, download, upload, direct.
_AZURE_DATA_MODES = {
    "inputs": {"mount": "ReadOnlyMount", "download": "Download", "direct": "Direct"},
    "outputs": {"mount": "ReadWriteMount", "upload": "Upload", "direct": "Direct"},
}
#: The same modes as az-yaml writes them.
_AZURE_YAML_MODES = {
    "ReadOnlyMount": "ro_mount",
    "ReadWriteMount": "rw_mount",
    "Download": "download",
    "Upload": "upload",
    "Direct": "direct",
}
_DATA_ASSET = re.compile(r"azureml:(?P<name>[^:@/]+):(?P<version>[^:@/]+)")
_DATA_ASSET_ID = re.compile(r"^/subscriptions/.*/data/(?P<name>[^/]+)/versions/(?P<version>[^/]+)$")


def _data_bindings(job: TrainingJob, direction: str, workspace: str) -> dict[str, Any]:
    """The job's own `inputs` or `outputs`, as `command(inputs=..., outputs=...)` sends them: a registered
    asset by its ARM id, any other location as its URI, an unset mode left to the service (mount)."""
    out: dict[str, Any] = {}
    declared = job.inputs if direction == "inputs" else job.outputs
    for name, location in declared.items():
        binding: dict[str, Any] = {}
        if location.path is not None:
            asset = _DATA_ASSET.fullmatch(location.path)
            uri = f"{workspace}/data/{asset['name']}/versions/{asset['version']}" if asset else location.path
            binding["uri"] = uri
        if location.mode is not None:
            binding["mode"] = _AZURE_DATA_MODES[direction][location.mode]
        binding["jobInputType" if direction == "inputs" else "jobOutputType"] = _AZURE_DATA_TYPES[location.type]
        out[name] = binding
    return out


def _yaml_bindings(bindings: Mapping[str, Any], kind_key: str) -> dict[str, Any]:
    """REST inputs or outputs in az-yaml's words."""
    out: dict[str, Any] = {}
    for name, binding in bindings.items():
        entry: dict[str, Any] = {"type": binding[kind_key]}
        if "uri" in binding:
            asset = _DATA_ASSET_ID.match(binding["uri"])
            entry["path"] = f"azureml:{asset['name']}:{asset['version']}" if asset else binding["uri"]
        if "mode" in binding:
            entry["mode"] = _AZURE_YAML_MODES[binding["mode"]]
        out[name] = entry
    return out


def _distribution(plan: _Plan) -> dict[str, Any]:
    if plan.framework == "tensorflow":
        return {"distributionType": "TensorFlow", "workerCount": plan.nodes, "parameterServerCount": 0}
    kind = "Mpi" if plan.framework == "mpi" else "PyTorch"
    return {"distributionType": kind, "processCountPerInstance": plan.processes_per_node}


class AzureMLBackend(Backend[AzureMLSettings]):
    """Azure ML command jobs. Example: `crosstrain submit job.yaml -t azureml --set workspace=my-ws`."""

    name = "azureml"
    title = "Azure Machine Learning"
    extra = "azureml"
    settings_model = AzureMLSettings
    formats = ("json", "az-yaml")
    handle_ref = {"subscription_id": str, "resource_group": str, "workspace": str}  # what status and cancel read
    capabilities = Capabilities(
        spot=True,
        logs=True,
        dedupes_create=True,  # the job name is chosen at render time and the PUT is create-or-update
        frameworks=frozenset({"pytorch", "mpi", "tensorflow"}),
        secret_stores=frozenset({"azure"}),  # Key Vault, read at start by crosstrain's runtime
        code=True,  # a code asset, as `command(code=DIR)` makes it
        requirements=True,  # with code: pip-installed by the bundle's bootstrap when each node starts
        environments=True,  # curated environments (RUNTIMES), or targets.azureml.environment
    )
    patch_schema = "azureml"
    owned_fields = {
        ("properties", "properties", FINGERPRINT_PROPERTY): FINGERPRINT_WHY,
        ("properties", "resources", "instanceCount"): NODES_WHY,
        ("properties", "distribution"): "the processes Azure starts on each node, which the ranks are planned for "
        "(set launch or targets.azureml.distributed_job_config)",
    }

    def __init__(
        self,
        *,
        transport: HttpTransport[Any, Any] | None = None,
        credential: TokenCredential | None = None,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        storage_transport: HttpTransport[Any, Any] | None = None,
        log_interval: float = 5.0,
    ) -> None:
        super().__init__(retry=retry, environ=environ, settings=settings)
        self.log_interval = log_interval  # how often `logs(follow=True)` looks for new lines
        self.transport = transport  # None: azure-core's requests transport
        #: The transport of the blob reads (the job's logs); None: azure-core's requests transport.
        self.storage_transport = storage_transport
        self.credential = credential  # None: DefaultAzureCredential, asked for a token at the first call
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()

    # -- render (pure) -------------------------------------------------------------------------------------
    def platform_refusals(self, job: TrainingJob, settings: AzureMLSettings) -> list[Problem]:
        problems = _plan(job, settings)[1]
        try:
            bundle = packaging.for_job(job, ignore_files=AML_IGNORE_FILES)
            if bundle is not None:
                code_content_hash(bundle.files)
        except UploadRefused as refused:
            problems.append(refused.problem)
        return problems

    def data_refusals(self, job: TrainingJob, settings: AzureMLSettings) -> list[Problem]:
        """Azure ML reads its data assets, datastores and Azure Storage URIs, in every mode; the service replaces
        `${{inputs.NAME}}` in the command only."""
        problems = []
        for direction, name, location in data.locations(job):
            kind = data.kind(location)
            if kind == "local" and direction == "outputs":
                problems.append(
                    data.refusal(
                        direction,
                        name,
                        f"{location.path} is a local path, and Azure ML writes outputs to a datastore",
                        "write azureml://datastores/<datastore>/paths/<path>, or leave `path` out (Azure ML picks "
                        "a place in the workspace's default datastore)",
                    )
                )
            elif kind == "local":
                problems.append(
                    data.refusal(
                        direction,
                        name,
                        f"{location.path} is a local path: azure-ai-ml would upload it to the workspace's datastore "
                        "before the job, and crosstrain uploads no data",
                        f"upload it once (az ml data create --name {name} --path {location.path} --type "
                        f"{_AZURE_DATA_TYPES[location.type]}) and write azureml:{name}:1",
                    )
                )
            elif location.path is not None and location.path.endswith("@latest"):
                problems.append(
                    data.refusal(
                        direction,
                        name,
                        "azure-ai-ml resolves the latest version with a lookup just before the create, and a "
                        "crosstrain request is fixed when it is rendered (so a re-submit is the same job)",
                        f"pin the version: {location.path.removesuffix('@latest')}:VERSION (`az ml data show -n "
                        f"{location.path.removeprefix('azureml:').removesuffix('@latest')} --label latest "
                        "--query version`)",
                    )
                )
            elif kind not in ("azureml", "azure", "none"):
                problems.append(
                    data.unreachable(
                        direction,
                        name,
                        location,
                        "Azure ML",
                        "azureml:NAME:VERSION data assets, azureml:// datastore paths, abfss:// and https:// Azure "
                        "Storage URIs",
                    )
                )
        for path, direction, name in data.references(job):
            if ".env." in f".{path}":
                problems.append(
                    Problem(
                        path,
                        f"Azure ML replaces ${{{{{direction}.{name}}}}} in the command only, not in environment "
                        "variables",
                        f"pass ${{{direction}.{name}}} to the program in `command` or `args`",
                    )
                )
        return problems

    def node_path(self, job: TrainingJob, settings: AzureMLSettings, direction: str, name: str, location: Any) -> str:
        return "${{" + f"{direction}.{name}" + "}}"

    def _render(self, job: TrainingJob, settings: AzureMLSettings, ids: Ids) -> Request:
        plan, problems = _plan(job, settings)
        if plan is None:
            raise Unsupported(self.name, problems)
        identity = ids.identity
        workspace = workspace_path(settings)
        job_url = f"{ARM}{workspace}/jobs/{identity}?api-version={API_VERSION}"
        calls = [
            HttpCall(
                "GET",
                job_url,
                purpose="look for a job with this name first: adopt it if its fingerprint is this request's, "
                "refuse if not; create only on 404 (the PUT below is create-or-update)",
            )
        ]
        notes = [plan.environment_note] if plan.environment_note else []
        headers = {"Content-Type": "application/json"}
        environment_id = plan.environment_id
        if plan.registers_image is not None:
            calls.append(
                HttpCall(
                    "PUT",
                    f"{ARM}{environment_id}?api-version={ENVIRONMENT_API_VERSION}",
                    {"properties": {"image": plan.registers_image, "isAnonymous": True, "isArchived": False}},
                    headers,
                    purpose="register the image as an anonymous environment (as azure-ai-ml does); idempotent",
                )
            )
        bundle = packaging.for_job(job, ignore_files=AML_IGNORE_FILES)
        code_id = None
        if bundle is not None:
            code_id, code_calls = _code_calls(bundle, workspace, headers)
            calls[1:1] = code_calls  # after the job lookup, before the environment: the SDK's order
            notes.append(f"ships {bundle.describe()} as code asset {code_asset_name(bundle)}")
            if bundle.requirements:
                notes.append(
                    f"the bootstrap pip-installs {', '.join(bundle.requirements)} on every node before the command "
                    "(crosstrain_code --install)"
                )
        command = plan.command
        # A shell line runs in Azure ML's own shell as it is: the node runs exactly the line the job file has.
        line = job.pools()[0].shell_line
        if plan.launcher_processes is not None:
            command = launcher_command(command, nproc_per_node=plan.launcher_processes, nnodes=plan.nodes)
        elif plan.framework == "mpi" and bundle is not None:
            # MPI names the rank only in OMPI_*; crosstrain travels with the code, and its launcher runs each
            # rank's command with torch's variables (RANK, LOCAL_RANK, MASTER_ADDR...) that frameworks read.
            command = launcher_command(command, nproc_per_node=1)
            notes.append(
                "each MPI rank runs the command under crosstrain's launcher, which sets torch's env:// variables"
            )
        pool = job.pools()[0]
        if pool.secrets:  # outermost: read the secrets, then start the launcher or the command
            command = secrets.resolver_command(command)
            notes.append(secrets.runtime_note(pool))
        if bundle is not None:  # from the snapshot root, which holds crosstrain_code/: the code's own folder
            command = bundle_command(command, install=bool(bundle.requirements))
        if command != plan.command:
            line = None  # wrapped: the shell line runs under bash -c, inside the wrapper's argv
        resources: dict[str, Any] = {"instanceCount": plan.nodes, "properties": {}}
        if not settings.compute:
            resources["instanceType"] = plan.machine.machine_type
        if settings.shm_size:
            resources["shmSize"] = settings.shm_size
        if settings.docker_args:
            resources["dockerArgs"] = settings.docker_args
        properties: dict[str, Any] = {
            "jobType": "Command",
            "displayName": job.name,
            "experimentName": settings.experiment or job.name,
            "command": line if line is not None else shlex.join(command),
            "environmentId": environment_id,
            "environmentVariables": plan.env,
            "inputs": _data_bindings(job, "inputs", workspace),
            "outputs": _data_bindings(job, "outputs", workspace),
            "distribution": _distribution(plan),
            "resources": resources,
            "tags": dict(job.labels),
            "properties": {FINGERPRINT_PROPERTY: ids.fingerprint},
            "isArchived": False,
        }
        if settings.compute:
            properties["computeId"] = f"{workspace}/computes/{settings.compute}"
        if code_id is not None:
            properties["codeId"] = code_id
        if job.scheduling.timeout:
            properties["limits"] = {"jobLimitsType": "Command", "timeout": iso_duration(job.scheduling.timeout)}
        queue: dict[str, Any] = {}
        tier = "spot" if job.scheduling.spot else settings.job_tier
        if tier:
            queue["jobTier"] = _JOB_TIERS[tier]
        if settings.priority:
            queue["priority"] = _PRIORITY[settings.priority]
        if queue:
            properties["queueSettings"] = queue
        if job.identity:
            properties["identity"] = _identity(job.identity)
        calls.append(
            HttpCall(
                "PUT",
                job_url,
                {"properties": properties},
                headers,
                purpose="create the command job under its fixed name, with this request's fingerprint in its "
                "properties; sent only when the GET found no job",
            )
        )
        if plan.nodes > 1 and plan.machine.gpu_count and not plan.machine.infiniband:
            notes.append(
                f"{plan.machine.machine_type} has no InfiniBand: multi-node GPU training will be slow over "
                "Ethernet; prefer an RDMA size with an `r` (e.g. Standard_ND96asr_v4, Standard_ND96isr_H100_v5)"
            )
        if settings.compute and plan.machine.machine_type:
            notes.append(
                f"the VM size is the one of cluster {settings.compute}; {plan.machine.machine_type} is used only "
                "for process counts and checks"
            )
        return Request(
            "azureml",
            identity,
            job.name,
            tuple(calls),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=bundle.ref if bundle is not None else None,
        )

    def format(self, request: Request, fmt: str) -> str:
        if fmt != "az-yaml":
            return super().format(request, fmt)
        import yaml

        text = yaml.safe_dump(cli_yaml(request), sort_keys=False, allow_unicode=True, width=120)
        unsaid = sorted(set(request.create.body.get("properties") or {}) - _CLI_FIELDS)  # a patch's
        if unsaid:
            text = (
                f"# not in this YAML: {', '.join(unsaid)} (targets.azureml.patch); crosstrain submit sends them\n"
                + text
            )
        return text

    # -- where credentials may go -------------------------------------------------------------------------
    binding_settings = ("subscription_id", "resource_group", "workspace")

    def _workspace_problems(self, found: Mapping[str, Any], path: str, what: str) -> list[Problem]:
        """Whether the workspace a handle or a request names is well formed and the configured one, where this
        machine configures its subscription, resource group or workspace (names compared as Azure does,
        ignoring case)."""
        configured = self.configured()
        problems = []
        for key in WORKSPACE_KEYS:
            value = found.get(key)
            if not isinstance(value, str) or not _SEGMENT.fullmatch(value):
                problems.append(
                    Problem(f"{path}.{key}", f"{shown(value)} is not an Azure resource name", "use the handle as made")
                )
            elif key in configured and value.lower() != configured[key].lower():
                env = env_vars(AzureMLSettings, key)[0]
                problems.append(
                    Problem(
                        f"{path}.{key}",
                        f"the {what} is for {key} {value!r}, this machine is configured for {configured[key]!r}",
                        f"pass --set {key}={value} (or set {env}) if that workspace is meant",
                    )
                )
        return problems

    @staticmethod
    def _url_problems(url: Any, found: Mapping[str, Any], path: str, what: str) -> list[Problem]:
        """An ARM URL in the named workspace: the only place the ARM token may go."""
        origin = origin_of(url)
        if origin != ARM:
            return [
                Problem(
                    path,
                    f"the {what} sends to {origin or shown(url)}; the Azure token goes only to {ARM}",
                    f"use a {what} made by crosstrain",
                )
            ]
        subscription, group, workspace = (str(found.get(key)) for key in WORKSPACE_KEYS)
        prefix = (
            f"/subscriptions/{subscription}/resourceGroups/{group}"
            f"/providers/Microsoft.MachineLearningServices/workspaces/{workspace}"
        )
        url_path = urlsplit(url).path
        if not (url_path.lower() + "/").startswith(prefix.lower() + "/"):
            return [
                Problem(path, f"{shown(url)} is outside the workspace {prefix}", f"use a {what} made by crosstrain")
            ]
        return []

    def handle_problems(self, handle: JobHandle) -> list[Problem]:
        problems = self._workspace_problems(handle.ref, "handle.ref", "handle")
        if not problems and "url" in handle.ref:
            problems += self._url_problems(handle.ref["url"], handle.ref, "handle.ref.url", "handle")
        return problems

    def request_problems(self, request: Request) -> list[Problem]:
        problems = self._workspace_problems(request.settings, "request.settings", "request")
        for i, call in enumerate(request.calls):
            if _is_blob_upload(call):  # sent with startPendingUpload's SAS only, never the ARM token
                continue
            problems += self._url_problems(call.url, request.settings, f"request.calls[{i}].url", "request")
        if request.code is None and any(_is_blob_upload(call) for call in request.calls):
            problems.append(Problem("request.code", "the request uploads code but names no folder", "render it again"))
        return problems

    # -- submit (sends) ------------------------------------------------------------------------------------
    def _client(self, ref: Mapping[str, Any]) -> Any:
        """The workspace's MLClient (one per workspace and backend); nothing is sent until the first call."""
        key = (str(ref["subscription_id"]), str(ref["resource_group"]), str(ref["workspace"]))
        with self._lock:
            if key not in self._clients:
                self._clients[key] = azure.ml_client(
                    self.credential, *key, timeout=self.retry.call_timeout, transport=self.transport
                )
            return self._clients[key]

    def send(self, request: Request) -> JobHandle:
        """Look for the job by its name first; adopt it if this request made it, refuse if another did; else
        register the environment (idempotent) and PUT the job, retried only where that cannot go wrong."""
        self.check_request(request)
        settings = self.request_settings(request)
        pipeline = self._client(settings.model_dump()).jobs.service_client_01_2025_preview  # its ARM pipeline
        create = request.create
        reads = [call for call in request.calls[:-1] if call.method == "GET"]
        lookup = reads[0] if reads else HttpCall("GET", create.url)
        where = f"Azure ML job {request.identity} in workspace {settings.workspace}"

        def find() -> tuple[dict[str, Any], bool] | None:
            found = _send(pipeline, lookup, missing_ok=True)
            return None if found is None else (found[1], True)

        existing = self.retry.poll(find)
        if existing is None:
            code = _CodeCalls.of(request)
            if code is not None:
                assert request.code is not None  # request_problems
                bundle = packaging.check_unchanged(request.code)
                code_id = self._ship_code(pipeline, code, bundle)
                if code_id != create.body["properties"].get("codeId"):
                    properties = {**create.body["properties"], "codeId": code_id}
                    create = HttpCall(
                        create.method,
                        create.url,
                        {**create.body, "properties": properties},
                        create.headers,
                        create.purpose,
                    )
            for call in request.calls[:-1]:
                if call.method != "GET" and (code is None or call not in code.all):
                    # the content-addressed environment PUT: repeating it changes nothing
                    self.retry.poll(functools.partial(_send, pipeline, call))

            def put() -> tuple[dict[str, Any], bool]:
                sent = _send(pipeline, create)
                assert sent is not None
                return sent[1], sent[0] == 200  # 200: the PUT found the job (a concurrent submit made it)

            existing = self.retry.create(
                put, dedupes=self.capabilities.dedupes_create, find=find, identity=request.identity
            )
        answer, adopted = existing
        if adopted:  # a job this submit did not make (or cannot tell it made): only this request's may be adopted
            self.check_same_request(request, fingerprint_of_job(answer), where)
        studio = ((answer.get("properties") or {}).get("services") or {}).get("Studio") or {}
        ref = {**{key: getattr(settings, key) for key in WORKSPACE_KEYS}, "url": create.url}
        return self.issue(
            JobHandle(
                "azureml",
                request.identity,
                request.identity,
                console_url=studio.get("endpoint") or studio_url(ref, request.identity),
                ref=ref,
                adopted=adopted,
            )
        )

    def _ship_code(self, pipeline: Any, code: _CodeCalls, bundle: packaging.Bundle) -> str:
        """The code asset the job runs, made the way azure-ai-ml makes it: found by its content hash (nothing
        uploaded), else uploaded to the container startPendingUpload hands out and registered. Its ARM id."""
        name, content_hash = code_asset_name(bundle), code_content_hash(bundle.files)
        if (
            code.upload.url != f"{SAS_CONTAINER}/{name}/"
            or f"&hash={content_hash}&" not in code.lookup.url
            or code.id != f"{urlsplit(code.register.url).path}"
        ):
            raise SubmitError(
                f"the request's code calls do not name the content of {bundle.folder} (asset {name}, hash "
                f"{content_hash}); render the request again"
            )
        found = self.retry.poll(lambda: _send(pipeline, code.lookup))
        assert found is not None
        hits = [v for v in (found[1].get("value") or []) if isinstance(v, dict) and v.get("id")]
        if hits:
            return str(hits[0]["id"]).removeprefix(ARM)
        answer = self.retry.poll(lambda: _send(pipeline, code.start))
        assert answer is not None
        reference = answer[1].get("blobReferenceForConsumption") or {}
        sas_uri = str((reference.get("credential") or {}).get("sasUri") or "")
        blob_uri = str(reference.get("blobUri") or "")
        if not sas_uri or not blob_uri:
            raise SubmitError(f"{code.start.url.split('?')[0]}: Azure answered without a container to upload to")
        prefix = f"{name}/"
        what = f"upload {len(bundle.files)} files of {bundle.folder} to the workspace's blob store"
        self.retry.poll(
            lambda: azure.upload_blobs(
                sas_uri,
                [(prefix + f.path, f.read) for f in bundle.files],
                metadata={"upload_status": "completed", "name": name, "version": "1"},
                timeout=self.retry.call_timeout,
                what=what,
            )
        )
        body = json.loads(json.dumps(code.register.body).replace(BLOB_CONTAINER, blob_uri.rstrip("/")))
        register = HttpCall(code.register.method, code.register.url, body, code.register.headers)
        self.retry.poll(functools.partial(_send, pipeline, register))
        return code.id

    def status(self, handle: JobHandle) -> JobStatus:
        self.check_handle(handle)
        native, state = self._state(handle)
        message = ""
        if state is JobState.FAILED:
            message = self._failure(handle)
        elif state is JobState.UNKNOWN:
            message = f"see {handle.console_url}"
        return JobStatus(state, native, message)

    def _state(self, handle: JobHandle) -> tuple[str, JobState]:
        ml = self._client(handle.ref)
        job = self.retry.poll(lambda: azure.call(lambda: ml.jobs.get(handle.job_id), f"read job {handle.job_id}"))
        native = str(getattr(job.status, "value", job.status) or "Unknown")
        return native, STATE_MAP.get(native, JobState.UNKNOWN)

    def _failure(self, handle: JobHandle) -> str:
        """What a failed job's logs say: the first rank (in rank order) whose log ends in an error, its last lines,
        and the kind of failure with what to do next; the job's own error where the service records one."""
        recorded: Any = ""
        texts: dict[str, list[str]] = {}
        try:
            job = self._job_json(handle)
            props = job.get("properties") or {}
            recorded = props.get("error") or (props.get("properties") or {}).get("azureml.runerror") or ""
            if isinstance(recorded, Mapping):
                recorded = recorded.get("message") or json.dumps(recorded)
            reader = self._log_reader(handle, job)
            if reader is not None:
                for name, line in reader.read(final=True):
                    texts.setdefault(name, []).append(line)
        except CrosstrainError:  # the logs are an aid here: the state stands without them
            texts = {}
        culprit = next((name for name in texts if _ERROR_LINE.search("\n".join(texts[name][-20:]))), None)
        tail = last_lines(texts[culprit]) if culprit else []
        who = _log_who(culprit) if culprit else ""
        what = f"{who} failed" if who else "the job failed"
        return summary(f"the first failure seen: {what}", str(recorded), tail, handle.console_url)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The workspace's jobs that carry crosstrain's fingerprint property, from the jobs list call
        `MLClient.jobs.list()` makes (`GET .../jobs`, active ones), newest first."""
        settings = resolve_settings(
            self.settings_model, self.name, overrides={**self.overrides, **(overrides or {})}, environ=self.environ
        )
        ref = {key: getattr(settings, key) for key in WORKSPACE_KEYS}
        ml = self._client(ref)
        what = f"list the jobs of workspace {settings.workspace}"
        jobs = self.retry.poll(lambda: azure.call(lambda: [j for j in ml.jobs.list() if j is not None], what))
        found = []
        for job in jobs:
            if not (getattr(job, "properties", None) or {}).get(FINGERPRINT_PROPERTY):
                continue
            created = getattr(getattr(job, "creation_context", None), "created_at", None)
            found.append((created.timestamp() if created else 0.0, job))
        for created, job in sorted(found, key=lambda item: -item[0]):
            native = str(getattr(job.status, "value", job.status) or "Unknown")
            console = str(getattr(job, "studio_url", None) or studio_url(ref, job.name))
            handle = JobHandle(
                "azureml", job.name, job.name, console_url=console, ref={**ref, "url": _job_url(ref, job.name)}
            )
            yield JobSummary(job.name, STATE_MAP.get(native, JobState.UNKNOWN), native, created, console, handle)

    def cancel(self, handle: JobHandle) -> None:
        self.check_handle(handle)
        ml = self._client(handle.ref)
        what = f"cancel job {handle.job_id}"
        self.retry.poll(lambda: azure.call(lambda: ml.jobs.begin_cancel(handle.job_id).result(), what))

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The job's log files as the service writes them (`user_logs/std_log*.txt` under the job's default
        output in its datastore, where `MLClient.jobs.stream` reads them), each line prefixed with the rank or
        node its file names. Each file is read from where the last read ended, so no line comes twice; with
        `follow`, again every `log_interval` seconds until the job ends, and the lines written by its end last."""
        self.check_handle(handle)
        job = self._job_json(handle)
        reader = self._log_reader(handle, job)
        if reader is None:  # no default output to read from: what `az ml job stream` shows, once the job ended
            yield from azure.stream_logs(self._client(handle.ref), handle.job_id)
            return
        while True:
            ended = not follow or self._state(handle)[1].terminal
            for name, line in reader.read(final=ended):
                yield _log_prefix(name) + line
            if ended:
                return
            self.retry.sleep(self.log_interval)

    def _job_json(self, handle: JobHandle) -> dict[str, Any]:
        """The job's ARM JSON (the GET submit renders), for its default output."""
        pipeline = self._client(handle.ref).jobs.service_client_01_2025_preview
        url = str(handle.ref.get("url") or _job_url(handle.ref, handle.job_id))
        found = self.retry.poll(lambda: _send(pipeline, HttpCall("GET", url)))
        assert found is not None
        return found[1]

    def _log_reader(self, handle: JobHandle, job: Mapping[str, Any]) -> _LogReader | None:
        """The container and folder of the job's logs, as `stream_logs_until_completion` finds them: the job's
        `default` uri_folder output names a datastore and a path; the datastore (read with its secrets) names
        the storage account and container."""
        outputs = (job.get("properties") or {}).get("outputs") or {}
        default = outputs.get("default") or {}
        uri = str(default.get("uri") or "")
        if default.get("jobOutputType", "uri_folder") != "uri_folder" or "datastores/" not in uri:
            return None
        store, _, prefix = uri.split("datastores/", 1)[1].partition("/")
        prefix = prefix.removeprefix("paths/").strip("/")
        ml = self._client(handle.ref)
        what = f"read datastore {store} of job {handle.job_id}"
        datastore = self.retry.poll(lambda: azure.call(lambda: ml.datastores.get(store, include_secrets=True), what))
        account = str(datastore.account_name)
        container_name = str(getattr(datastore, "container_name", None) or getattr(datastore, "filesystem", ""))
        protocol = str(getattr(datastore, "protocol", None) or "https")
        endpoint = str(getattr(datastore, "endpoint", None) or "core.windows.net")
        secret = datastore.credentials
        credential: Any
        if getattr(secret, "sas_token", None):
            credential = str(secret.sas_token)
        elif getattr(secret, "account_key", None):
            credential = {"account_name": account, "account_key": str(secret.account_key)}
        else:  # an identity-based datastore: the workspace's credential reads it, as in the SDK
            credential = self.credential or azure.default_credential()
        container = azure.blob_container(
            f"{protocol}://{account}.blob.{endpoint}",
            container_name,
            credential,
            transport=self.storage_transport,
            timeout=self.retry.call_timeout,
        )
        return _LogReader(container, prefix, self.retry)


#: The settings that name the workspace, as a handle keeps them.
WORKSPACE_KEYS = ("subscription_id", "resource_group", "workspace")


#: The log files `MLClient.jobs.stream` reads (azure-ai-ml's `COMMON_RUNTIME_ALL_USER_LOG_PATTERN`; it streams
#: only rank 0's, crosstrain every rank's): `user_logs/std_log.txt`, `user_logs/std_log_process_N.txt`, ...
_LOG_FILE = re.compile(r"(^|/)user_logs/std_log[^/]*\.txt$")
_LOG_NODE = re.compile(r"node_(\d+)")
_LOG_RANK = re.compile(r"process_(\d+)")
#: A line that says a process failed (how the failing rank's log is told from the others).
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\b\w*(Error|Exception)\b:|\bKilled\b|exit(ed)? (with )?code", re.I
)


def _log_numbers(name: str) -> tuple[int, int]:
    base = name.rsplit("/", 1)[-1]
    node, rank = _LOG_NODE.search(base), _LOG_RANK.search(base)
    return (int(node[1]) if node else -1, int(rank[1]) if rank else -1)


def _log_who(name: str) -> str:
    """`rank N` (`node N rank M`) as the log file's name tells it; empty for a file that names neither."""
    node, rank = _log_numbers(name)
    parts = ([f"node {node}"] if node >= 0 else []) + ([f"rank {rank}"] if rank >= 0 else [])
    return " ".join(parts)


def _log_prefix(name: str) -> str:
    who = _log_who(name)
    return f"[{who}] " if who else ""


class _LogReader:
    """A job's log blobs, each read from the offset where the last read ended: a line is yielded once, whole
    (a line still being written waits for its newline, unless the job has ended)."""

    def __init__(self, container: Any, prefix: str, retry: RetryPolicy) -> None:
        self.container = container
        self.prefix = f"{prefix}/user_logs/" if prefix else "user_logs/"
        self.retry = retry
        self.offsets: dict[str, int] = {}
        self.partial: dict[str, bytes] = {}

    def _sizes(self) -> list[tuple[str, int]]:
        what = f"list the logs under {self.prefix}"

        def listing() -> list[tuple[str, int]]:
            blobs = self.container.list_blobs(name_starts_with=self.prefix)
            return [(str(b.name), int(b.size or 0)) for b in blobs if _LOG_FILE.search(str(b.name))]

        found = self.retry.poll(lambda: azure.call(listing, what))
        return sorted(found, key=lambda item: (*_log_numbers(item[0]), item[0]))

    def _chunk(self, name: str, start: int, end: int) -> bytes:
        what = f"read log {name}"

        def download() -> bytes:
            return bytes(self.container.download_blob(name, offset=start, length=end - start).readall())

        return self.retry.poll(lambda: azure.call(download, what))

    def read(self, *, final: bool = False) -> Iterator[tuple[str, str]]:
        """(file, line) for every whole line written since the last read, file by file in rank order."""
        for name, size in self._sizes():
            start = self.offsets.get(name, 0)
            if size > start:
                data = self._chunk(name, start, size)
                self.offsets[name] = start + len(data)
                *lines, rest = (self.partial.pop(name, b"") + data).split(b"\n")
                self.partial[name] = rest
                for line in lines:
                    yield name, line.decode("utf-8", "replace").rstrip("\r")
            if final and self.partial.get(name):
                yield name, self.partial.pop(name).decode("utf-8", "replace").rstrip("\r")


def _job_url(ref: Mapping[str, Any], name: str) -> str:
    return (
        f"{ARM}/subscriptions/{ref['subscription_id']}/resourceGroups/{ref['resource_group']}"
        f"/providers/Microsoft.MachineLearningServices/workspaces/{ref['workspace']}/jobs/{name}"
        f"?api-version={API_VERSION}"
    )


def fingerprint_of_job(job: Mapping[str, Any]) -> str | None:
    """The fingerprint crosstrain recorded on a job (ARM JSON), if any."""
    properties = ((job.get("properties") or {}).get("properties")) or {}
    value = properties.get(FINGERPRINT_PROPERTY)
    return str(value) if value else None


def studio_url(settings: Mapping[str, Any], name: str) -> str:
    wsid = (
        f"/subscriptions/{settings['subscription_id']}/resourcegroups/{settings['resource_group']}"
        f"/workspaces/{settings['workspace']}"
    )
    return f"https://ml.azure.com/runs/{name}?wsid={wsid}"


def _send(pipeline: Any, call: HttpCall, *, missing_ok: bool = False) -> tuple[int, dict[str, Any]] | None:
    """One rendered call, unchanged, through the MLClient's pipeline; None for a 404 if `missing_ok`."""
    what = f"{call.method} {call.url.split('?')[0]}"
    http = azure.http_request(call.method, call.url, call.body, dict(call.headers))
    response = azure.call(lambda: pipeline.send_request(http), what)
    if response.status_code == 404 and missing_ok:
        return None
    azure.raise_for_status(response, what)
    try:
        body = response.json()
    except ValueError:
        body = {}
    return int(response.status_code), body if isinstance(body, dict) else {}


def _is_blob_upload(call: HttpCall) -> bool:
    return call.url.startswith(SAS_CONTAINER)


@dataclass(frozen=True)
class _CodeCalls:
    """The rendered code-asset calls of a request (see `_code_calls`)."""

    lookup: HttpCall
    start: HttpCall
    upload: HttpCall
    register: HttpCall
    id: str

    @property
    def all(self) -> tuple[HttpCall, ...]:
        return (self.lookup, self.start, self.upload, self.register)

    @classmethod
    def of(cls, request: Request) -> _CodeCalls | None:
        calls = list(request.calls)
        uploads = [i for i, call in enumerate(calls) if _is_blob_upload(call)]
        if not uploads:
            return None
        i = uploads[0]
        if i < 2 or i + 1 >= len(calls) - 1:
            raise SubmitError("the request's code calls are not in the order render makes them; render it again")
        code_id = str(request.create.body["properties"].get("codeId") or "")
        return cls(calls[i - 2], calls[i - 1], calls[i], calls[i + 1], code_id)


# -- the CLI v2 YAML form ----------------------------------------------------------------------------------
#: The job properties `cli_yaml` writes (or that have no CLI field and say nothing: jobType, isArchived).
_CLI_FIELDS = frozenset(
    {
        "jobType", "displayName", "experimentName", "command", "environmentId", "codeId", "environmentVariables",
        "computeId", "distribution", "resources", "limits", "queueSettings", "identity", "tags", "properties",
        "description", "services", "inputs", "outputs", "isArchived",
    }
)  # fmt: skip


def cli_yaml(request: Request) -> dict[str, Any]:
    """The rendered job as Azure ML CLI v2 YAML (`az ml job create -f`), derived from the request itself."""
    props = request.create.body["properties"]
    images = {
        c.url.split("?")[0].removeprefix(ARM): c.body["properties"]["image"]
        for c in request.calls[:-1]
        if c.method == "PUT" and "image" in ((c.body or {}).get("properties") or {})
    }
    env_id = props["environmentId"]
    if env_id in images:
        environment: Any = {"image": images[env_id]}
    else:
        match = re.search(r"^/subscriptions/.*/environments/([^/]+)/versions/([^/]+)$", env_id)
        environment = f"azureml:{match[1]}:{match[2]}" if match else env_id
    out: dict[str, Any] = {
        "$schema": CLI_SCHEMA,
        "type": "command",
        "name": request.identity,
        "command": props["command"],
        "environment": environment,
    }
    for wire, field_name in (("displayName", "display_name"), ("experimentName", "experiment_name")):
        if props.get(wire):  # a patch may remove them
            out[field_name] = props[wire]
    if "codeId" in props:  # the code asset submit uploads (or finds by its content): by name and version
        match = re.search(r"/codes/([^/]+)/versions/([^/]+)$", props["codeId"])
        out["code"] = f"azureml:{match[1]}:{match[2]}" if match else props["codeId"]
    if props.get("environmentVariables"):
        out["environment_variables"] = dict(props["environmentVariables"])
    if props.get("inputs"):
        out["inputs"] = _yaml_bindings(props["inputs"], "jobInputType")
    if props.get("outputs"):
        out["outputs"] = _yaml_bindings(props["outputs"], "jobOutputType")
    if "computeId" in props:
        out["compute"] = "azureml:" + props["computeId"].rsplit("/", 1)[-1]
    dist = props.get("distribution") or {}  # a patch may remove it
    if dist.get("distributionType") == "TensorFlow":
        out["distribution"] = {
            "type": "tensorflow",
            "worker_count": dist["workerCount"],
            "parameter_server_count": dist["parameterServerCount"],
        }
    elif dist:
        out["distribution"] = {
            "type": dist["distributionType"].lower(),
            "process_count_per_instance": dist["processCountPerInstance"],
        }
    wire_names = {
        "instanceCount": "instance_count",
        "instanceType": "instance_type",
        "shmSize": "shm_size",
        "dockerArgs": "docker_args",
    }
    out["resources"] = {
        snake: props["resources"][camel] for camel, snake in wire_names.items() if camel in props["resources"]
    }
    if (props.get("limits") or {}).get("timeout"):  # a patch may remove it
        out["limits"] = {"timeout": seconds_of(props["limits"]["timeout"])}
    if "queueSettings" in props:
        queue = props["queueSettings"]
        out["queue_settings"] = {}
        if "jobTier" in queue:
            out["queue_settings"]["job_tier"] = queue["jobTier"].lower()
        if "priority" in queue:
            out["queue_settings"]["priority"] = {v: k for k, v in _PRIORITY.items()}[queue["priority"]]
    if "identity" in props:
        identity = props["identity"]
        kind = {"Managed": "managed", "AMLToken": "aml_token"}[identity["identityType"]]
        out["identity"] = {"type": kind, **({"client_id": identity["clientId"]} if "clientId" in identity else {})}
    if props.get("tags"):
        out["tags"] = dict(props["tags"])
    if props.get("properties"):
        out["properties"] = dict(props["properties"])
    if props.get("description"):  # from targets.azureml.patch
        out["description"] = props["description"]
    if props.get("services"):
        out["services"] = {name: _cli_service(service) for name, service in props["services"].items()}
    return out


#: REST job service types -> the CLI's (azure-ai-ml's JobServiceTypeNames), and the service properties the CLI
#: names as fields of their own.
_SERVICE_TYPES = {"JupyterLab": "jupyter_lab", "SSH": "ssh", "TensorBoard": "tensor_board", "VSCode": "vs_code"}
_SERVICE_FIELDS = {"sshPublicKeys": "ssh_public_keys", "logDir": "log_dir"}


def _cli_service(service: Mapping[str, Any]) -> dict[str, Any]:
    """A job service (`targets.azureml.patch: {properties: {services: ...}}`) as the CLI YAML writes it."""
    kind = service.get("jobServiceType")
    out: dict[str, Any] = {"type": _SERVICE_TYPES.get(kind, kind)} if kind else {}
    if "port" in service:
        out["port"] = service["port"]
    if (service.get("nodes") or {}).get("nodesValueType") == "All":
        out["nodes"] = "all"
    rest = dict(service.get("properties") or {})
    for wire, field_name in _SERVICE_FIELDS.items():
        if wire in rest:
            out[field_name] = rest.pop(wire)
    if rest:
        out["properties"] = rest
    return out
