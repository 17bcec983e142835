"""What an Azure ML target is configured with: the workspace settings, the platform's runtimes and the SDK v1
distribution forms, which the `distributed_job_config` setting accepts and converts."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from crosstrain.environments import Runtime, Runtimes
from crosstrain.records import JobState
from crosstrain.settings import TargetSettings, setting

if TYPE_CHECKING:
    pass


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
#: The ignore files read at the code folder's root after git's rules (`crosstrain.ignores`): the SDK's
#: `.amlignore`, then crosstrain's own. Unlike azure-ai-ml, which reads `.amlignore` instead of `.gitignore`,
#: both add to git's rules, so a file .gitignore keeps out (a key, an .env) is not shipped because an .amlignore
#: exists; a `!pattern` in either brings back what git's rules leave out.
AML_IGNORE_FILES = (".amlignore", ".crosstrainignore")
#: What the blob upload call's URL starts with: the container SAS URL that only startPendingUpload's answer
#: gives (`blobReferenceForConsumption.credential.sasUri`), filled in by submit.
SAS_CONTAINER = "{sasUri}"
#: What the code version's `codeUri` starts with: the container URL of the same answer (`blobUri`).
BLOB_CONTAINER = "{blobUri}"

# -- Docker build contexts: what `create_or_update` does for `Environment(build=BuildContext(path=DIR))`
# (azure-ai-ml 1.35.2, _artifacts/_artifact_utilities.py `_check_and_upload_env_build_context`,
# `upload_artifact`, `get_datastore_info`; _utils/_asset_utils.py `get_object_hash`; verified against Azurite) --
#: The datastore azure-ai-ml uploads a build context to: the workspace's default blob store.
BLOB_STORE = "workspaceblobstore"
#: The api-version of its datastore calls (the GET, listSecrets).
DATASTORE_API_VERSION = "2024-10-01-preview"
#: The folder of the blob store the SDK uploads local artifacts under, then the folder's object hash, then its name.
LOCAL_UPLOAD = "LocalUpload"
#: What the build context's blob URLs and `contextUri` start with: the container URL of the blob store, which its
#: GET answers with (`https://<accountName>.blob.<endpoint>/<containerName>`), filled in by submit.
STORE_CONTAINER = "{workspaceblobstore}"

# -- local inputs: what `create_or_update` does for `Input(path=<a local file or folder>)` (azure-ai-ml 1.35.2,
# operations/_job_operations.py `_resolve_job_input`, _artifacts/_artifact_utilities.py
# `_upload_and_generate_remote_uri`; verified against Azurite): the same blob store and upload as a build context --
#: The ignore files of a folder uploaded as an input, at its root only: the SDK's `get_ignore_file` (its
#: `.amlignore`, else its `.gitignore`; `ignores.own_rules`), then crosstrain's own. A repository's other
#: .gitignore files do not apply: data is what they most often leave out.
INPUT_IGNORE_FILES = (".amlignore|.gitignore", ".crosstrainignore")
#: An uploaded input's URI: `azureml://datastores/<store>/paths/<its blob path>` (the SDK's SHORT_URI_FORMAT).
DATASTORE_URI = "azureml://datastores/{store}/paths/{path}"

# -- a user identity: what `create_or_update` adds for `identity=UserIdentityConfiguration()` (azure-ai-ml 1.35.2,
# operations/_job_operations.py `_set_headers_with_user_aml_token`) ----------------------------------------------
#: The resource the submitter's token is for: Azure ML's (`_get_aml_resource_id_from_metadata` on Azure's public
#: cloud, whose ARM crosstrain talks to); the SDK refuses a token with another audience, and so does crosstrain.
AML_RESOURCE = "https://ml.azure.com"
#: The header of the job PUT that carries it (never rendered: `records.CREDENTIAL_HEADERS`).
USER_TOKEN_HEADER = "x-azureml-token"

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
_JOB_TIERS = {
    "spot": "Spot",
    "basic": "Basic",
    "standard": "Standard",
    "premium": "Premium",
}
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
        "Nccl",
        description="Accepted for compatibility; v2 has no such field (choose it in code).",
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
        raise PydanticCustomError(
            "crosstrain",
            "{value} is not an SDK v1 distribution",
            {"value": value, "fix": fix},
        )
    out: dict[str, Any] = {"type": match["kind"]}
    for part in filter(None, (p.strip() for p in match["args"].split(","))):
        key, sep, raw = part.partition("=")
        if not sep:
            raise PydanticCustomError(
                "crosstrain",
                "{part} is a positional argument",
                {"part": part, "fix": fix},
            )
        raw = raw.strip().strip("'\"")
        out[key.strip()] = int(raw) if raw.isdigit() else raw
    return out


V1Distribution = Annotated[
    Annotated[
        PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration,
        Field(discriminator="type"),
    ],
    BeforeValidator(
        _parse_v1_call,
        json_schema_input_type=str | PyTorchConfiguration | MpiConfiguration | TensorflowConfiguration,
    ),
]


class BuildContext(BaseModel):
    """`targets.azureml.build`: a Docker build context, as the CLI's `environment: {build: {path: ...}}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(
        description="The folder (relative to the job file's folder) with the Dockerfile and what it copies; "
        "uploaded as it is, less what git's rules, .amlignore and .crosstrainignore leave out."
    )
    dockerfile_path: str | None = Field(
        None,
        description="The Dockerfile, relative to the folder. Default: the folder's `Dockerfile` (Azure ML's "
        "default; it is then not sent, as azure-ai-ml does not send it).",
    )


#: code_archive_above's default: a request made with it does not write it (its settings read as they did before).
CODE_ARCHIVE_ABOVE = 1000


class AzureMLSettings(TargetSettings):
    subscription_id: str = setting(description="Azure subscription id.", env=("AZURE_SUBSCRIPTION_ID",))
    resource_group: str = setting(
        description="Resource group of the workspace.",
        env=("AZURE_RESOURCE_GROUP", "AZUREML_ARM_RESOURCEGROUP"),
    )
    workspace: str = setting(
        description="Azure ML workspace name.",
        env=("AZUREML_WORKSPACE_NAME", "AZUREML_ARM_WORKSPACE_NAME"),
    )
    compute: str | None = setting(
        None,
        description="Compute cluster name (its VM size is the cluster's). Omit for serverless compute, "
        "where the job's machine is the VM size.",
    )
    experiment: str | None = setting(
        None,
        description="Experiment name; defaults to the job name (the SDK would use the current directory).",
    )
    environment: str | None = setting(
        None,
        description="An environment: `azureml:<name>:<version>`, `azureml:<name>@latest` (the `azureml:` prefix "
        "optional), a registry URI (`azureml://registries/<registry>/environments/<name>/versions/<v>` or "
        "`.../labels/latest`) or an ARM id; passed on as azure-ai-ml passes it. Default: the job's "
        "`environment` from crosstrain's table, else its image, registered as an anonymous environment the way "
        "azure-ai-ml does.",
    )
    conda_file: str | None = Field(
        None,
        description="A conda environment file (relative to the job file's folder) that Azure ML builds on the "
        "job's `image` as the job's environment, as `Environment(image=..., conda_file=...)` does: registered as an "
        "anonymous environment, its version the digest of the image and the file, so the service builds it once.",
    )
    build: BuildContext | None = Field(
        None,
        description="A Docker build context Azure ML builds the job's environment from, as "
        "`Environment(build=BuildContext(path=...))` does: `{path: FOLDER, dockerfile_path: Dockerfile}`. The folder "
        "is uploaded to the workspace's blob store and registered as an anonymous environment, its version the "
        "digest of the folder's content, so the service builds each content once. The Dockerfile's FROM names the "
        "base image: the job names no `image`, `environment` or conda_file.",
    )
    code_archive_above: int = Field(
        CODE_ARCHIVE_ABOVE,
        ge=0,
        description="Above this many files the code folder goes up as one archive (crosstrain_code/ and "
        "crosstrain_code/src.tar.gz, unpacked by the bootstrap once per node) rather than one blob per file: 0 "
        "archives every folder with files, a very large number none. The studio's code view then shows the archive, "
        "not the files.",
    )
    shm_size: str | None = Field(
        None,
        pattern=_SHM_SIZE,
        description="Shared memory of each container, e.g. 16g (Azure's default is 2g).",
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


def settings_dump(settings: AzureMLSettings) -> dict[str, Any]:
    """The settings a request records: every one, less code_archive_above where it is the default."""
    default = settings.code_archive_above == CODE_ARCHIVE_ABOVE
    return settings.model_dump(mode="json", exclude={"code_archive_above"} if default else None)
