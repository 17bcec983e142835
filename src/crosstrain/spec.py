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
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from crosstrain import catalog
from crosstrain.secrets import SECRET_FORMS_TEXT, match_reference, schema_pattern

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def _invalid(message: str, fix: str) -> PydanticCustomError:
    """A validation error whose context carries the fix, which `crosstrain.loader` shows under the message."""
    return PydanticCustomError("crosstrain", message.replace("{", "{{").replace("}", "}}"), {"fix": fix})


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
    Field(description="argv list, or one string split like a shell would (no shell is involved)."),
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
    code: str | None = Field(
        None,
        description="A local folder shipped with the job (relative to the job file): packaged, uploaded, and the "
        "command runs from it on every node. `.crosstrainignore` (else `.gitignore`) leaves files out.",
    )
    requirements: Requirements | None = None
    command: Command | None = None
    args: list[str] = Field(default_factory=list)
    env: Env = Field(
        default_factory=dict,
        description="Environment variables of every pool: NAME: value, or NAME: {secret: REF} to pass a secret "
        "by reference (the render shows the reference, never a value).",
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

    def located(self, base_dir: Path | None) -> TrainingJob:
        """This job, with relative paths resolved against `base_dir` (the job file's folder)."""
        self._base_dir = None if base_dir is None else Path(base_dir).absolute()
        return self

    @model_validator(mode="after")
    def _one_runtime(self) -> TrainingJob:
        if self.environment is not None and self.image is not None:
            raise _invalid(
                "the job names both an image and an environment",
                "keep `image` (your own container) or `environment` (the platform's runtime), not both",
            )
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

    @field_validator("code")
    @classmethod
    def _code(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value):
            raise _invalid(f"{value!r} is not a folder", "name a folder relative to the job file, e.g. ./src")
        return value

    @field_validator("requirements")
    @classmethod
    def _requirement_lines(cls, value: list[str] | RequirementsFile | None) -> list[str] | RequirementsFile | None:
        if isinstance(value, list):
            for line in value:
                if not _REQUIREMENT.fullmatch(line):
                    shown = line if len(line) <= 60 else f"{line[:57]}..."
                    raise _invalid(
                        f"{shown!r} is not a requirement",
                        "write one pip requirement per item, e.g. transformers==4.44.0 (no options, no blank items)",
                    )
        return value

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

    @classmethod
    def of(cls, role: str, pool: _Pool, job: TrainingJob, primary: PoolView | None) -> PoolView:
        inherit = primary if role == "workers" else None
        env = {**job.env, **(job.primary.env if inherit else {}), **pool.env}

        def where(name: str) -> str:  # the field that set the variable, for refusals
            if name in pool.env:
                return f"{role}.env.{name}"
            return f"primary.env.{name}" if inherit and name in job.primary.env else f"env.{name}"

        return cls(
            role=role,
            replicas=int(getattr(pool, "replicas", 1)),
            image=pool.image or (inherit.image if inherit else None) or job.image,
            command=pool.command if pool.command is not None else (inherit.command if inherit else job.command),
            args=pool.args if pool.args is not None else (inherit.args if inherit else list(job.args)),
            env={k: v for k, v in env.items() if isinstance(v, str)},
            machine=pool.machine or (inherit.machine if inherit else None),
            boot_disk=pool.boot_disk or (inherit.boot_disk if inherit else None),
            machine_path=f"{role}.machine" if pool.machine or not inherit else inherit.machine_path,
            secrets={k: (v, where(k)) for k, v in env.items() if isinstance(v, SecretRef)},
        )
