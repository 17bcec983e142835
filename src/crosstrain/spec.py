"""The job spec: one `TrainingJob` that every backend compiles into its platform's request.

Immutable pydantic v2 models with `extra="forbid"`, so a typo is an error rather than a silently ignored
field. Shorthands keep job files short (`machine: A100:8`, `command: python train.py`, `timeout: 24h`); the
JSON Schema (`crosstrain schema`) documents both the long and the short forms.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from crosstrain import catalog, locations
from crosstrain.safe import redact, url_credentials
from crosstrain.secrets import SECRET_FORMS_TEXT, match_reference, schema_pattern

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def _invalid(message: str, fix: str) -> PydanticCustomError:
    """A validation error whose context carries the fix, which `crosstrain.loader` shows under the message."""
    return PydanticCustomError("crosstrain", message.replace("{", "{{").replace("}", "}}"), {"fix": fix})


def _at(loc: tuple[str | int, ...], value: Any, message: str, fix: str) -> InitErrorDetails:
    """An `_invalid` error at the field path `loc`, for validators that check several fields at once."""
    return InitErrorDetails(type=PydanticCustomError("crosstrain", message, {"fix": fix}), loc=loc, input=value)


_POOL_ROLES = ("primary", "workers", "parameter_servers", "evaluators")


#: The longest duration a job may ask for: a year and a day, in seconds. Far beyond any training run, and within
#: every platform's encoding (Databricks takes an int32 of seconds, Google a protobuf Duration).
MAX_DURATION = 366 * 86400
_DURATION_FIX = 'write seconds (3600) or a duration such as "90m", "24h", "1h30m"'


def parse_duration(value: Any) -> Any:
    """`90`, `"90s"`, `"15m"`, `"24h"`, `"7d"`, `"1h30m"` -> whole seconds."""
    if value is None:
        return value
    if isinstance(value, bool):  # pydantic would take true as 1 second
        raise _invalid(f"{value!r} is not a duration", _DURATION_FIX)
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        match = _DURATION.fullmatch(text)
        if text and match and any(match.groups()):
            d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = d * 86400 + h * 3600 + m * 60 + s
            if not seconds <= MAX_DURATION:  # 400 digits of days are infinite as a float
                shown = value if len(value) <= 40 else f"{value[:37]}..."
                raise _invalid(f"{shown!r} is longer than a job may run", f"use at most {MAX_DURATION} (366d)")
            return round(seconds)
        if re.fullmatch(r"\d+", text):
            if len(text) <= 12:
                return int(text)  # the bound below refuses what is too long
            raise _invalid(f"{value[:40]!r}... is longer than a job may run", f"use at most {MAX_DURATION} (366d)")
    raise _invalid(f"{value!r} is not a duration", _DURATION_FIX)


Duration = Annotated[
    int,
    BeforeValidator(parse_duration, json_schema_input_type=int | str),
    Field(gt=0, le=MAX_DURATION, description='Seconds, or a duration such as "90m", "24h", "1h30m".'),
]


def _split_command(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    import shlex

    try:
        return shlex.split(value)
    except ValueError as exc:  # an unclosed quote or a trailing escape
        raise _invalid(
            f"{value!r} cannot be split like a shell would: {str(exc).lower()}",
            "close the quote, or write the command as a list, e.g. [python, train.py]",
        ) from None


Command = Annotated[
    list[str],
    BeforeValidator(_split_command, json_schema_input_type=str | list[str]),
    Field(
        description="argv list, or one string split like a shell would (no shell is involved); with `shell: true`, "
        "one shell line."
    ),
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Accelerator(_Model):
    """GPUs attached to each node of a pool."""

    type: str = Field(
        description="GPU kind: a portable name (A100, A100-80GB, H100, H200, L4, T4, V100, P100, ...) "
        "or a platform's own name (NVIDIA_TESLA_A100). `crosstrain catalog` lists them."
    )
    count: int = Field(1, ge=1, le=16, description="GPUs per node.")

    @field_validator("type")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        kind = catalog.canonical_gpu(value)
        if kind is None:
            raise _invalid(*catalog.unknown_gpu(value))
        return kind


def _parse_machine(value: Any) -> Any:
    """`"A100:8"` / `"A100"` -> accelerator; any other string -> machine type."""
    if not isinstance(value, str):
        return value
    kind, _, count = value.partition(":")
    if count or catalog.canonical_gpu(kind) or catalog.retired_gpu(kind):
        # ASCII digits only: str.isdigit() takes '²', which int() refuses, and int() refuses 5,000 digits.
        if count and not re.fullmatch(r"[0-9]{1,6}", count.strip()):
            shown = value if len(value) <= 40 else f"{value[:37]}..."
            raise _invalid(f"{shown!r} is not GPU:COUNT", "write the portable form as e.g. A100:8")
        return {"accelerator": {"type": kind, "count": int(count) if count else 1}}
    return {"type": value}


class Machine(_Model):
    """The machine of each node of a pool: a machine type, GPUs, or both."""

    type: str | None = Field(
        None,
        description="Platform machine type (n1-standard-8, a2-highgpu-8g, Standard_ND96asr_v4, "
        "g5.12xlarge). Passed through; the catalog picks one from the GPUs when omitted.",
    )
    accelerator: Accelerator | None = None

    @model_validator(mode="before")
    @classmethod
    def _count_needs_type(cls, data: Any) -> Any:
        accel = data.get("accelerator") if isinstance(data, dict) else None
        if isinstance(accel, dict) and "type" not in accel and "count" in accel:
            raise _invalid(
                "accelerator.count is set but accelerator.type is missing",
                f"add accelerator.type (one of {', '.join(catalog.gpu_names())}), or write e.g. `machine: A100:8`",
            )
        return data

    @property
    def gpus(self) -> int:
        return self.accelerator.count if self.accelerator else 0


MachineField = Annotated[Machine, BeforeValidator(_parse_machine, json_schema_input_type=str | Machine)]


class BootDisk(_Model):
    type: str | None = Field(None, description="Disk type where the platform lets you choose (pd-ssd, pd-standard).")
    size_gb: int | None = Field(None, ge=10, le=65536)


class SecretRef(_Model):
    """An environment variable whose value stays in a secret store: the job carries the reference, and the
    value is read on the node (by the platform, or by crosstrain's runtime at start), never by crosstrain here."""

    secret: str = Field(
        description="The secret's reference in its store: a Databricks `scope/key`, a Google Secret Manager "
        "`projects/<project>/secrets/<name>[/versions/<n>]` (default version: latest), or an Azure Key Vault "
        "`https://<vault>.vault.azure.net/secrets/<name>[/<version>]`. Each target resolves the stores it can "
        "and refuses the others.",
        json_schema_extra={"pattern": schema_pattern()},
    )

    @field_validator("secret")
    @classmethod
    def _form(cls, value: str) -> str:
        if match_reference(value) is None:
            shown = value if len(value) <= 80 else f"{value[:77]}..."
            raise _invalid(f"{shown!r} is not a secret reference", f"write {SECRET_FORMS_TEXT}")
        return value

    @property
    def store(self) -> str:
        """Which store the reference names: one of `SECRET_STORES`."""
        found = match_reference(self.secret)
        assert found is not None, "validated"
        return found[0]


def _env_value(value: Any) -> Any:
    """A plain value (a string) or `{secret: REF}`; anything else is refused here, with one clear message."""
    if isinstance(value, str | SecretRef):
        return value
    if isinstance(value, dict):
        if set(value) != {"secret"}:
            raise _invalid(
                f"an environment value is a string, or a mapping whose one key is `secret`, not a mapping of "
                f"{sorted(map(str, value))}",
                f"write {{secret: REF}} with REF {SECRET_FORMS_TEXT}",
            )
        return SecretRef.model_validate(value)
    raise _invalid(
        f"{value!r} is not a string" if not isinstance(value, list | tuple) else "an environment value is not a list",
        "quote the value, or write {secret: REF} to name a secret",
    )


EnvValue = Annotated[
    str | SecretRef,
    BeforeValidator(_env_value, json_schema_input_type=str | SecretRef),
    Field(description="A value, or `{secret: REF}`: a secret's reference, resolved on the node."),
]
Env = dict[str, EnvValue]


_DATA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
#: `${inputs.NAME}` / `${outputs.NAME}` in a command, an argument or an environment value.
DATA_REFERENCE = re.compile(r"\$\{(inputs|outputs)\.([^{}]*)\}")
#: Azure ML's own spelling, `${{inputs.NAME}}`, which each target renders from the portable one.
_AZURE_REFERENCE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([^{}]*?)\s*\}\}")


def _check_bucket(value: str, shown: str) -> None:
    """A gs:// location names a bucket Cloud Storage could hold, on every target."""
    why = locations.bucket_problem(value) if value.startswith("gs://") else None
    if why:
        raise _invalid(f"{shown!r} is not a Cloud Storage location: {why}", "write gs://BUCKET/PATH, BUCKET as named")


def _data_location(value: Any) -> Any:
    """The short form, a path, is `{path: PATH}`."""
    return {"path": value} if isinstance(value, str) else value


class _DataLocation(_Model):
    path: str | None = Field(
        None,
        description="Where the data is: gs://BUCKET/PATH, azureml:NAME:VERSION or azureml:NAME@latest (a "
        "registered data asset), azureml://..., abfss://..., https://ACCOUNT.blob.core.windows.net/..., "
        "s3://..., /Volumes/..., dbfs:/..., or a local path (relative to the job file; the local target).",
    )
    type: Literal["folder", "file", "table", "mlflow_model", "custom_model"] = Field(
        "folder",
        description="folder (default), file, or one of Azure ML's own: table (an mltable), mlflow_model or "
        "custom_model (a registered model, azureml:NAME:VERSION, or a model folder on a datastore).",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is None:
            return value
        shown = value if len(value) <= 80 else f"{value[:77]}..."
        if not value.strip() or any(ord(c) < 32 for c in value):
            raise _invalid(f"{shown!r} is not a data location", f"write {locations.FORMS_TEXT}")
        scheme, sep, rest = value.partition("://")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) and scheme.lower() not in locations.SCHEMES:
            raise _invalid(f"{shown!r}: crosstrain reads no {scheme}:// locations", f"write {locations.FORMS_TEXT}")
        if sep and not rest.strip("/"):
            raise _invalid(f"{shown!r} names no bucket, container or path", f"write {locations.FORMS_TEXT}")
        if value.startswith("azureml:") and not value.startswith("azureml://") and not locations.ASSET.fullmatch(value):
            raise _invalid(
                f"{shown!r} is not a registered data asset",
                "write azureml:NAME:VERSION or azureml:NAME@latest (or an azureml://datastores/... URI)",
            )
        if value.startswith("dbfs:") and not value.startswith("dbfs:/"):
            raise _invalid(f"{shown!r} is not a DBFS path", "write dbfs:/PATH")
        _check_bucket(value, shown)
        return value

    @model_validator(mode="after")
    def _type_fits_path(self) -> _DataLocation:
        path = self.path or ""
        if self.type == "file" and (path.endswith("/") or re.fullmatch(r"[A-Za-z0-9]+://[^/]+/?", path)):
            raise _invalid(
                f"{path!r} names a folder (or a bucket), and the type is file",
                "name the file (gs://bucket/data/train.csv), or use type: folder",
            )
        if self.type in locations.AZURE_TYPES and path and locations.kind(path) not in locations.TABLE_KINDS:
            raise _invalid(
                f"{locations.AZURE_TYPES[self.type]}, and {path!r} is not an Azure location",
                "use type: folder (or file), or an azureml:, azureml://, abfss:// or https:// location",
            )
        return self

    def shown_mode(self) -> str:
        """The mode, or the default (mount) where none is set."""
        return getattr(self, "mode", None) or "mount"


class DataInput(_DataLocation):
    """Data the command reads: named in `command`, `args` and `env` as `${inputs.NAME}`."""

    mode: Literal["mount", "download", "direct"] | None = Field(
        None,
        description="mount (read-only; the default), download (copied to the node before the command), or "
        "direct (the URI itself, for code that reads it with its own client). A target without the mode refuses it.",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        return _check_mode(value, "inputs")


class DataOutput(_DataLocation):
    """Where the command writes: named in `command`, `args` and `env` as `${outputs.NAME}`."""

    mode: Literal["mount", "upload", "direct"] | None = Field(
        None,
        description="mount (read-write; the default), upload (written on the node, uploaded at the end), or "
        "direct (the URI itself). A target without the mode refuses it.",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        return _check_mode(value, "outputs")


def _check_mode(value: Any, direction: str) -> Any:
    if not isinstance(value, str) or value in locations.MODES[direction]:
        return value  # None, or the wrong type, which the field's own check words
    other = "outputs" if direction == "inputs" else "inputs"
    if value in locations.MODES[other]:
        why = f"{value} is a mode of {other}, not of {direction}"
    else:
        why = f"{value!r} is not a data mode"
    raise _invalid(why, f"use one of {', '.join(locations.MODES[direction])} (default: mount)")


DataInputField = Annotated[DataInput, BeforeValidator(_data_location, json_schema_input_type=str | DataInput)]
DataOutputField = Annotated[DataOutput, BeforeValidator(_data_location, json_schema_input_type=str | DataOutput)]


class _Pool(_Model):
    image: str | None = Field(None, description="Container image; defaults to the job's `image`.")
    command: Command | None = Field(None, description="Overrides the job's command for this pool.")
    args: list[str] | None = Field(None, description="Overrides the job's args for this pool.")
    env: Env = Field(default_factory=dict, description="Added to the job's env for this pool.")
    machine: MachineField | None = None
    boot_disk: BootDisk | None = None


class PrimaryPool(_Pool):
    """The primary node (rank 0, chief, master, driver). Always one replica."""

    replicas: Literal[1] = Field(1, description="Always 1; scale out with `workers.replicas`.")

    @field_validator("replicas", mode="before")
    @classmethod
    def _one(cls, value: Any) -> Any:
        if value != 1:
            raise _invalid(
                f"the primary pool has exactly one replica, not {value!r}",
                f"set workers.replicas: {int(value) - 1 if isinstance(value, int) and value > 1 else 0}"
                " for the other nodes",
            )
        return value


class WorkerPool(_Pool):
    """Worker nodes. Image, command and machine default to the primary's."""

    replicas: int = Field(0, ge=0, le=10000, description="Worker nodes besides the primary.")


class AuxiliaryPool(_Pool):
    """Parameter servers or evaluators, where the platform has them."""

    replicas: int = Field(1, ge=1, le=10000)


class ReductionServer(_Model):
    """Vertex AI Reduction Server: CPU nodes that speed up all-reduce for multi-node GPU jobs."""

    replicas: int | Literal["auto"] = Field(
        "auto", description='Reducer nodes, or "auto" to match the training pools\' egress bandwidth.'
    )
    machine_type: str = "n1-highcpu-16"
    image: str | None = Field(None, description="Defaults to the reduction-server image nearest the job's region.")

    @field_validator("replicas")
    @classmethod
    def _positive(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 1:
            raise _invalid("reduction_server.replicas must be at least 1", 'use a positive count or "auto"')
        return value


class Scheduling(_Model):
    timeout: Duration | None = Field(None, description="Stop the job after this long.")
    max_wait: Duration | None = Field(None, description="Give up if the job has not started after this long.")
    spot: bool = Field(False, description="Spot / preemptible / low-priority capacity where the platform has it.")
    max_restarts: int | None = Field(
        None, ge=0, le=100, description="Restarts after a failure; platform default if unset."
    )


class Launch(_Model):
    """How processes are started on each node."""

    mode: Literal["auto", "per-process", "per-node"] = Field(
        "auto",
        description="per-process: the platform starts one process per GPU. per-node: the platform starts one "
        "process per node and crosstrain's launcher starts one per GPU. auto: whatever the platform does best.",
    )
    processes_per_node: int | None = Field(None, ge=1, le=128, description="Default: GPUs per node, else 1.")
    framework: Literal["pytorch", "mpi", "tensorflow"] = "pytorch"


_REQUIREMENT = re.compile(r"[A-Za-z0-9][^\x00-\x1f\x7f]{0,299}")
_PORTABLE_ENVIRONMENT = re.compile(r"pytorch(?::(\d+\.\d+))?")


def requirement_problem(line: str) -> tuple[str, str] | None:
    """Why `line` cannot be one of the job's requirements (the message and the fix), or None. The one rule for an
    item of the list and a line of a requirements file: every target installs each line as a package (Vertex AI
    and AI Platform as the package's install_requires, Databricks as a PyPI library), and prints and ships it."""
    shown = redact(line)
    shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
    if not _REQUIREMENT.fullmatch(line):
        return (
            f"{shown!r} is not a requirement"
            + (": pip options (-r, -e, --extra-index-url...) are not packages" if line.startswith("-") else ""),
            "write one pip requirement per item or line, e.g. transformers==4.44.0; an index is pip's configuration "
            "on the nodes (PIP_EXTRA_INDEX_URL, or a pip.conf in your image), and another file's lines go here",
        )
    if url_credentials(line):
        return (
            f"{shown!r} carries credentials in its URL; crosstrain would print it in renders and ship it with the "
            "code (Databricks' `libraries` refuse it too)",
            "remove the user:token@ part and give the credential to pip or git on the nodes: a netrc or credential "
            "helper in your image, or an environment variable from a secret in `env`",
        )
    return None


def _requirements(value: Any) -> Any:
    """A list of requirements, or the name of a requirements file (kept as `{"file": NAME}`)."""
    if isinstance(value, str):
        return {"file": value}
    return value


class RequirementsFile(_Model):
    file: str = Field(description="A pip requirements file, relative to the job file.")


Requirements = Annotated[
    list[str] | RequirementsFile,
    BeforeValidator(_requirements, json_schema_input_type=str | list[str]),
    Field(
        description="Python packages installed on every node before the command: a list of pip requirements, "
        "or a requirements file (relative to the job file). Each target installs them its own way, or refuses."
    ),
]


def _code_folder(value: str) -> str:
    if not value.strip() or "\x00" in value:
        raise _invalid(f"{value!r} is not a folder", "name a folder relative to the job file, e.g. ./src")
    return value


class CodeFolder(_Model):
    """`code` as a mapping: a folder outside the job file's folder, shipped because the job says so by name."""

    path: str = Field(description="The folder, relative to the job file (or absolute).")
    outside_job_folder: bool = Field(
        False,
        description="Ship the folder although it is outside the job file's folder (through '..', an absolute "
        "path or a symlink). Without it such a folder is refused, so a job file cannot ship e.g. ~/.aws unnoticed.",
    )

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _code_folder(value)


class TrainingJob(_Model):
    """A distributed training job, independent of where it runs."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"$comment": "crosstrain job file; see `crosstrain schema`"},
    )

    name: str = Field(description="Job name: a letter, then letters, digits, '.', '_' or '-' (at most 63).")
    run_id: str | None = Field(
        None,
        description="Makes the job's identity unique. Omit to derive it from the spec (identical re-submits "
        "are deduplicated); set a new one to run the same spec again.",
    )
    image: str | None = Field(None, description="Default container image of every pool.")
    environment: str | None = Field(
        None,
        description="A platform-managed runtime instead of an `image`: `pytorch` (each platform's current PyTorch "
        "runtime, GPU or CPU by the machine) or `pytorch:MAJOR.MINOR`. A target's own runtime names go in its "
        "settings (targets.<target>.environment).",
    )
    code: str | CodeFolder | None = Field(
        None,
        description="A local folder shipped with the job, under the job file's folder (relative to it): packaged, "
        "uploaded, and the command runs from it on every node. What git ignores there (.gitignore files from the "
        "repository's root down, .git/info/exclude) and what `.crosstrainignore` lists is left out. A folder "
        "outside the job file's folder is refused unless named as {path: ../shared, outside_job_folder: true}.",
    )
    requirements: Requirements | None = None
    command: Command | None = None
    args: list[str] = Field(default_factory=list)
    env: Env = Field(
        default_factory=dict,
        description="Environment variables of every pool: NAME: value, or NAME: {secret: REF} to pass a secret "
        "by reference (the render shows the reference, never a value).",
    )
    shell: bool = Field(
        False,
        description="The command is one shell line, run by each platform's shell (so $RANK, && and quotes work); "
        "`command` is then a single string, and `args` are appended to it shell-quoted.",
    )
    inputs: dict[str, DataInputField] = Field(
        default_factory=dict,
        description="Named data the command reads: NAME: PATH, or NAME: {path, type, mode}. `${inputs.NAME}` in "
        "command, args and env values becomes the path where the node sees the data.",
    )
    outputs: dict[str, DataOutputField] = Field(
        default_factory=dict,
        description="Named locations the command writes: NAME: PATH, or NAME: {path, type, mode}. "
        "`${outputs.NAME}` in command, args and env values becomes the path where the node writes.",
    )
    primary: PrimaryPool = Field(default_factory=PrimaryPool)
    workers: WorkerPool = Field(default_factory=WorkerPool)
    reduction_server: ReductionServer | None = None
    parameter_servers: AuxiliaryPool | None = None
    evaluators: AuxiliaryPool | None = None
    launch: Launch = Field(default_factory=Launch)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    labels: dict[str, str] = Field(default_factory=dict)
    identity: str | None = Field(
        None,
        description="What the job runs as: a GCP service-account email, an Azure identity, a Databricks "
        "service principal.",
    )
    network: str | None = Field(None, description="VPC / virtual network the nodes join.")
    output_dir: str | None = Field(None, description="Where the job writes its outputs (gs://, azureml://, dbfs:/).")
    targets: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-target settings, e.g. targets.vertex.project. `crosstrain schema` "
        "lists every target's settings.",
    )

    #: The folder relative paths in the job (`code`, `requirements`) are resolved against: the job file's folder.
    _base_dir: Path | None = PrivateAttr(None)
    #: The file the job was loaded from, which never ships with the code (`packaging.for_job`).
    _job_file: Path | None = PrivateAttr(None)
    #: A pickled `(fn, args, kwargs)` shipped with the job (`crosstrain.run(fn, job)`); never in a job file.
    _function: bytes | None = PrivateAttr(None)

    @property
    def function_payload(self) -> bytes | None:
        return self._function

    def with_function(self, payload: bytes) -> TrainingJob:
        """A copy of this job that ships `payload` and runs it on every rank (`crosstrain.function`)."""
        job = self.model_copy()
        job._function = payload
        return job

    @property
    def base_dir(self) -> Path:
        """The job file's folder; the current folder for a job made in Python."""
        return self._base_dir if self._base_dir is not None else Path.cwd()

    def __eq__(self, other: object) -> bool:
        """Jobs are equal when their fields are: where the job file lies is not part of the spec."""
        if not isinstance(other, TrainingJob):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = BaseModel.__hash__

    @property
    def job_file(self) -> Path | None:
        """The file the job was loaded from; None for stdin or a job made in Python."""
        return self._job_file

    def located(self, base_dir: Path | None) -> TrainingJob:
        """This job, with relative paths resolved against `base_dir` (the job file's folder)."""
        self._base_dir = None if base_dir is None else Path(base_dir).absolute()
        return self

    def loaded_from(self, source: str | Path) -> TrainingJob:
        """This job, read from the file `source` (or `-`, stdin): relative paths resolve against its folder, and
        the file itself is left out of the code it may lie in (the request already carries what it says; shipped,
        editing one target's settings there would move every target's identity)."""
        if str(source) == "-":
            return self.located(None)
        self._job_file = Path(source).absolute()
        return self.located(self._job_file.parent)

    @model_validator(mode="before")
    @classmethod
    def _shell_lines(cls, data: Any) -> Any:
        """With `shell: true` a command is one line, kept whole (as a one-item list) rather than split."""
        if not isinstance(data, dict) or data.get("shell") is not True:
            return data
        data = dict(data)
        errors = []
        for role in ("", *_POOL_ROLES):
            holder = data if not role else data.get(role)
            if not isinstance(holder, dict) or "command" not in holder:
                continue
            command = holder["command"]
            path = ("command",) if not role else (role, "command")
            if isinstance(command, list) and len(command) == 1 and isinstance(command[0], str):
                command = command[0]
            if isinstance(command, str):
                if not command.strip():
                    errors.append(_at(path, command, "the shell line is empty", "write the line the node runs"))
                holder = {**holder, "command": [command]} if role else holder
                if role:
                    data[role] = holder
                else:
                    data["command"] = [command]
            elif command is not None:
                errors.append(
                    _at(
                        path,
                        command,
                        "with shell: true the command is one shell line, not a list",
                        'write it as one string, e.g. "cd src && python train.py", or remove `shell: true`',
                    )
                )
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return data

    @model_validator(mode="after")
    def _data_references(self) -> TrainingJob:
        """Every `${inputs.NAME}` / `${outputs.NAME}` names a declared location; names are identifiers."""
        errors = []
        for direction, declared in (("inputs", self.inputs), ("outputs", self.outputs)):
            for name, location in declared.items():
                if not _DATA_NAME.fullmatch(name):
                    errors.append(
                        _at(
                            (direction, name),
                            name,
                            f"{name!r} is not a valid {direction[:-1]} name",
                            "use letters, digits and '_', not starting with a digit (it is written ${"
                            f"{direction}.NAME}} in the command)",
                        )
                    )
                if location.path is None and direction == "inputs":
                    errors.append(_at((direction, name, "path"), None, "an input needs a path", "add `path:`"))
        for name in sorted(set(self.inputs) & set(self.outputs)):
            errors.append(
                _at(("outputs", name), name, f"{name!r} names both an input and an output", "rename one of them")
            )
        for path, text in self.reference_sites():
            for found in _AZURE_REFERENCE.finditer(text):
                errors.append(
                    _at(
                        path,
                        text,
                        f"{found[0]} is Azure ML's spelling",
                        f"write ${{{found[1]}.{found[2]}}}: each target renders it (Azure ML as {found[0]})",
                    )
                )
            for found in DATA_REFERENCE.finditer(text):
                direction, name = found[1], found[2]
                declared = self.inputs if direction == "inputs" else self.outputs
                if name in declared:
                    continue
                import difflib

                close = difflib.get_close_matches(name, list(declared), n=1, cutoff=0.6)
                if close:
                    fix = f"did you mean ${{{direction}.{close[0]}}}?"
                elif declared:
                    fix = f"use one of {', '.join(f'${{{direction}.{n}}}' for n in declared)}"
                else:
                    fix = f"declare it under `{direction}:` (NAME: PATH)"
                errors.append(_at(path, text, f"{found[0]} names no {direction[:-1]} of the job", fix))
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    def reference_sites(self) -> list[tuple[tuple[str | int, ...], str]]:
        """(field path, text) of every command word, argument and plain environment value of the job and its
        pools: where `${inputs.NAME}` and `${outputs.NAME}` may appear."""
        sites: list[tuple[tuple[str | int, ...], str]] = []
        holders: list[tuple[tuple[str, ...], Any]] = [((), self)]
        holders += [((role,), getattr(self, role)) for role in _POOL_ROLES if getattr(self, role) is not None]
        for prefix, holder in holders:
            for attr in ("command", "args"):
                for i, word in enumerate(getattr(holder, attr) or []):
                    sites.append(((*prefix, attr, i), word))
            for name, value in holder.env.items():
                if isinstance(value, str):
                    sites.append(((*prefix, "env", name), value))
        return sites

    @model_validator(mode="after")
    def _one_runtime(self) -> TrainingJob:
        if self.environment is not None and self.image is not None:
            raise _invalid(
                "the job names both an image and an environment",
                "keep `image` (your own container) or `environment` (the platform's runtime), not both",
            )
        return self

    @model_validator(mode="after")
    def _requirement_lines(self) -> TrainingJob:
        """Each item of a requirements list, at its index (a file's lines are checked where it is read)."""
        if isinstance(self.requirements, list):
            errors = [
                _at(("requirements", i), line, *problem)
                for i, line in enumerate(self.requirements)
                if (problem := requirement_problem(line)) is not None
            ]
            if errors:
                raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @field_validator("environment")
    @classmethod
    def _environment(cls, value: str | None) -> str | None:
        if value is not None and not _PORTABLE_ENVIRONMENT.fullmatch(value):
            raise _invalid(
                f"{value!r} is not a portable environment",
                "write `pytorch` or `pytorch:2.4`; a platform's own runtime goes in targets.<target>.environment",
            )
        return value

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, value: str | None) -> str | None:
        if value is not None:
            _check_bucket(value, value if len(value) <= 80 else f"{value[:77]}...")
        return value

    @field_validator("code")
    @classmethod
    def _code(cls, value: str | CodeFolder | None) -> str | CodeFolder | None:
        return _code_folder(value) if isinstance(value, str) else value

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", value).strip("-.") or "job"
            slug = slug if slug[0].isalpha() else f"job-{slug}"
            raise _invalid(
                f"{value!r} is not a valid job name",
                f"start with a letter and use letters, digits, '.', '_' or '-', e.g. {slug[:63]!r}",
            )
        return value

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", value):
            raise _invalid(f"{value!r} is not a valid run id", "use 1-32 lowercase letters, digits or '-'")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise _invalid(
                    f"{name!r} is not a valid environment variable name",
                    "use letters, digits and '_', not starting with a digit",
                )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key:
                raise _invalid("a label key is empty", "give every label a name")
        return value

    @property
    def nodes(self) -> int:
        """Training nodes: the primary plus the workers."""
        return 1 + self.workers.replicas

    def pools(self) -> list[PoolView]:
        """Every pool in use, with the job's defaults filled in, in platform order."""
        primary = PoolView.of("primary", self.primary, self, None)
        views = [primary]
        if self.workers.replicas:
            views.append(PoolView.of("workers", self.workers, self, primary))
        if self.parameter_servers:
            views.append(PoolView.of("parameter_servers", self.parameter_servers, self, primary))
        if self.evaluators:
            views.append(PoolView.of("evaluators", self.evaluators, self, primary))
        return views

    def processes_per_node(self, gpus_per_node: int) -> int:
        return self.launch.processes_per_node or max(gpus_per_node, 1)

    def _repr_html_(self) -> str:
        from crosstrain.display import job_html

        return job_html(self)


#: How every target runs a `shell: true` line: the platform's container (or node) starts bash with it.
SHELL_COMMAND = ("bash", "-c")


@dataclass(frozen=True)
class PoolView:
    """A pool with the job's defaults applied: what every backend actually renders."""

    role: str
    replicas: int
    image: str | None
    command: list[str] | None
    args: list[str]
    #: Plain values only; the variables whose value is a secret are in `secrets`.
    env: dict[str, str]
    machine: Machine | None
    boot_disk: BootDisk | None
    machine_path: str
    #: NAME -> (the reference, the field path that set it): variables to be read from a store on the node.
    secrets: dict[str, tuple[SecretRef, str]] = dataclasses.field(default_factory=dict)
    #: With `shell: true`, the line (args appended, shell-quoted) that `command` runs as `bash -c LINE`.
    shell_line: str | None = None

    @classmethod
    def of(cls, role: str, pool: _Pool, job: TrainingJob, primary: PoolView | None) -> PoolView:
        inherit = primary if role == "workers" else None
        env = {**job.env, **(job.primary.env if inherit else {}), **pool.env}

        def where(name: str) -> str:  # the field that set the variable, for refusals
            if name in pool.env:
                return f"{role}.env.{name}"
            return f"primary.env.{name}" if inherit and name in job.primary.env else f"env.{name}"

        base_command, base_args = job.command, list(job.args)
        if inherit:  # the primary's own command and args (a shell line is built below from these)
            base_command = job.primary.command if job.primary.command is not None else base_command
            base_args = job.primary.args if job.primary.args is not None else base_args
        command = pool.command if pool.command is not None else base_command
        args = pool.args if pool.args is not None else base_args
        line = None
        if job.shell and command:
            import shlex

            line = " ".join([command[0], *(shlex.quote(a) for a in args)])
            command, args = [*SHELL_COMMAND, line], []
        return cls(
            role=role,
            replicas=int(getattr(pool, "replicas", 1)),
            image=pool.image or (inherit.image if inherit else None) or job.image,
            command=command,
            args=args,
            env={k: v for k, v in env.items() if isinstance(v, str)},
            machine=pool.machine or (inherit.machine if inherit else None),
            boot_disk=pool.boot_disk or (inherit.boot_disk if inherit else None),
            machine_path=f"{role}.machine" if pool.machine or not inherit else inherit.machine_path,
            secrets={k: (v, where(k)) for k, v in env.items() if isinstance(v, SecretRef)},
            shell_line=line,
        )
