"""The job spec: one `TrainingJob` that every backend compiles into its platform's request.

Immutable pydantic v2 models with `extra="forbid"`, so a typo is an error rather than a silently ignored
field. Shorthands keep job files short (`machine: A100:8`, `command: python train.py`, `timeout: 24h`); the
JSON Schema (`crosstrain schema`) documents both the long and the short forms.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from crosstrain.errors import closest
from crosstrain.frozen import frozen
from crosstrain.safe import redact, url_credentials
from crosstrain.spec_fields import (
    AZURE_REFERENCE,
    DATA_NAME,
    DATA_REFERENCE,
    Alternative,
    BootDisk,
    Command,
    DataInputField,
    DataOutputField,
    Duration,
    Env,
    Machine,
    MachineField,
    SecretRef,
    SpecModel,
    check_bucket,
    error_at,
    invalid,
    no_items,
)
from crosstrain.sweep import Sweep, reference_problems

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_POOL_ROLES = ("primary", "workers", "parameter_servers", "evaluators")


class _Pool(SpecModel):
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
            raise invalid(
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


class ReductionServer(SpecModel):
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
            raise invalid("reduction_server.replicas must be at least 1", 'use a positive count or "auto"')
        return value


class Scheduling(SpecModel):
    timeout: Duration | None = Field(None, description="Stop the job after this long.")
    max_wait: Duration | None = Field(None, description="Give up if the job has not started after this long.")
    spot: bool = Field(False, description="Spot / preemptible / low-priority capacity where the platform has it.")
    max_restarts: int | None = Field(
        None, ge=0, le=100, description="Restarts after a failure; platform default if unset."
    )
    max_cost: float | None = Field(
        None,
        gt=0,
        le=10_000_000,
        allow_inf_nan=False,
        description="Refuse the job where its cost for `timeout` (list prices, spot priced as spot) could exceed "
        "this many US dollars, or cannot be known.",
    )


class Launch(SpecModel):
    """How processes are started on each node."""

    mode: Literal["auto", "per-process", "per-node"] = Field(
        "auto",
        description="per-process: the platform starts one process per GPU. per-node: the platform starts one "
        "process per node and crosstrain's launcher starts one per GPU. auto: whatever the platform does best.",
    )
    processes_per_node: int | None = Field(None, ge=1, le=128, description="Default: GPUs per node, else 1.")
    framework: Literal["pytorch", "mpi", "tensorflow", "deepspeed", "horovod"] = Field(
        "pytorch",
        description="deepspeed: a PyTorch job whose every rank is given `--deepspeed` (and `--deepspeed_config "
        "FILE`), started as each platform documents (Azure ML's PyTorch or MPI distribution, Databricks' "
        "DeepspeedTorchDistributor, crosstrain's launcher on Vertex AI and AI Platform). horovod: an MPI job "
        "(Azure ML); refused where the platform has no MPI between nodes.",
    )
    deepspeed_config: str | None = Field(
        None,
        max_length=1024,
        description="The DeepSpeed config (JSON) every rank is given as `--deepspeed_config`, as the command "
        "sees it: relative to the code folder (it ships with the code, and is checked to be there), or an "
        "absolute path in the image.",
    )

    @field_validator("deepspeed_config")
    @classmethod
    def _deepspeed_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        framework = info.data.get("framework")
        if value is not None and framework != "deepspeed":
            raise invalid(
                f"deepspeed_config is given to DeepSpeed jobs, and launch.framework is {framework}",
                "set launch.framework: deepspeed, or remove launch.deepspeed_config",
            )
        if value is not None and (not value.strip() or value.startswith("-")):
            raise invalid(f"{value!r} is not a file name", "name the config file, e.g. ds_config.json")
        return value

    def framework_args(self) -> list[str]:
        """What the framework's own launcher adds to every rank's command, appended to the job's args:
        DeepSpeed's `--deepspeed --deepspeed_config FILE`, as `deepspeed` and DeepspeedTorchDistributor do."""
        if self.framework != "deepspeed":
            return []
        return ["--deepspeed", *(["--deepspeed_config", self.deepspeed_config] if self.deepspeed_config else [])]


#: DeepSpeed's own flags, as a word of a command or inside a shell line.
_DEEPSPEED_FLAG = re.compile(r"(?:^|\s)(--deepspeed(?:_config)?)(?:[=\s]|$)")
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


class RequirementsFile(SpecModel):
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
        raise invalid(f"{value!r} is not a folder", "name a folder relative to the job file, e.g. ./src")
    return value


class CodeFolder(SpecModel):
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


class TrainingJob(SpecModel):
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
    args: list[str] = Field(default_factory=no_items)
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
    sweep: Sweep | None = Field(
        None,
        description="Hyperparameter tuning: trials of the job on the target's own tuning service, each with its "
        "values of the sweep's parameters (`${sweep.NAME}` in command, args and env values).",
    )
    targets: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-target settings, e.g. targets.vertex.project. `crosstrain schema` "
        "lists every target's settings.",
    )
    fallback: list[Alternative] = Field(
        default_factory=no_items,
        max_length=8,
        description="Where to try the job next, in order, when the target refuses it for quota or capacity, fails "
        "it for capacity before it runs, or its wait for capacity (scheduling.max_wait) expires: each alternative "
        "changes the target, region, machine or settings. One run, one live job at a time.",
    )

    #: The folder relative paths in the job (`code`, `requirements`) are resolved against: the job file's folder.
    _base_dir: Path | None = PrivateAttr(None)
    #: The file the job was loaded from, which never ships with the code (`packaging.for_job`).
    _job_file: Path | None = PrivateAttr(None)
    #: A pickled `(fn, args, kwargs)` shipped with the job (`crosstrain.run(fn, job)`); never in a job file.
    _function: bytes | None = PrivateAttr(None)
    _function_note: str = PrivateAttr("")

    @property
    def function_payload(self) -> bytes | None:
        return self._function

    @property
    def function_note(self) -> str:
        """What the shipped function replaces, where it replaces the job file's own command ("" elsewhere)."""
        return self._function_note

    def with_function(self, payload: bytes, note: str = "") -> TrainingJob:
        """A copy of this job that ships `payload` and runs it on every rank (`crosstrain.function`)."""
        job = self.model_copy()
        job._function = payload
        job._function_note = note
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
                    errors.append(error_at(path, command, "the shell line is empty", "write the line the node runs"))
                holder = {**holder, "command": [command]} if role else holder
                if role:
                    data[role] = holder
                else:
                    data["command"] = [command]
            elif command is not None:
                errors.append(
                    error_at(
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
                if not DATA_NAME.fullmatch(name):
                    errors.append(
                        error_at(
                            (direction, name),
                            name,
                            f"{name!r} is not a valid {direction[:-1]} name",
                            "use letters, digits and '_', not starting with a digit (it is written ${"
                            f"{direction}.NAME}} in the command)",
                        )
                    )
                if location.path is None and direction == "inputs":
                    errors.append(error_at((direction, name, "path"), None, "an input needs a path", "add `path:`"))
        for name in sorted(set(self.inputs) & set(self.outputs)):
            errors.append(
                error_at(("outputs", name), name, f"{name!r} names both an input and an output", "rename one of them")
            )
        for path, text in self.reference_sites():
            for found in AZURE_REFERENCE.finditer(text):
                errors.append(
                    error_at(
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
                close = closest(name, declared)
                if close:
                    fix = f"did you mean ${{{direction}.{close}}}?"
                elif declared:
                    fix = f"use one of {', '.join(f'${{{direction}.{n}}}' for n in declared)}"
                else:
                    fix = f"declare it under `{direction}:` (NAME: PATH)"
                errors.append(error_at(path, text, f"{found[0]} names no {direction[:-1]} of the job", fix))
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
    def _sweep_references(self) -> TrainingJob:
        """Every `${sweep.NAME}` names a parameter of the job's sweep."""
        errors = reference_problems(self)
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _framework_args_once(self) -> TrainingJob:
        """DeepSpeed's arguments come from `launch`: given in the args too, every rank would get them twice."""
        if self.launch.framework != "deepspeed":
            return self
        errors = [
            error_at(
                path,
                text,
                f"{found[1]} is what launch.framework: deepspeed gives every rank",
                "remove it from the command; name the config once, as launch.deepspeed_config",
            )
            for path, text in self.reference_sites()
            if path[-2] in ("command", "args") and (found := _DEEPSPEED_FLAG.search(text))
        ]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _one_runtime(self) -> TrainingJob:
        if self.environment is not None and self.image is not None:
            raise invalid(
                "the job names both an image and an environment",
                "keep `image` (your own container) or `environment` (the platform's runtime), not both",
            )
        return self

    @model_validator(mode="after")
    def _fallback_alone(self) -> TrainingJob:
        if self.fallback and self.sweep is not None:
            raise invalid(
                "a sweep's trials are each their own job: fallback applies to one job",
                "remove `fallback` or `sweep`",
            )
        return self

    @model_validator(mode="after")
    def _requirement_lines(self) -> TrainingJob:
        """Each item of a requirements list, at its index (a file's lines are checked where it is read)."""
        if isinstance(self.requirements, list):
            errors = [
                error_at(("requirements", i), line, *problem)
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
            raise invalid(
                f"{value!r} is not a portable environment",
                "write `pytorch` or `pytorch:2.4`; a platform's own runtime goes in targets.<target>.environment",
            )
        return value

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, value: str | None) -> str | None:
        if value is not None:
            check_bucket(value, value if len(value) <= 80 else f"{value[:77]}...")
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
            raise invalid(
                f"{value!r} is not a valid job name",
                f"start with a letter and use letters, digits, '.', '_' or '-', e.g. {slug[:63]!r}",
            )
        return value

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,31}", value):
            raise invalid(f"{value!r} is not a valid run id", "use 1-32 lowercase letters, digits or '-'")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise invalid(
                    f"{name!r} is not a valid environment variable name",
                    "use letters, digits and '_', not starting with a digit",
                )
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key:
                raise invalid("a label key is empty", "give every label a name")
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


@frozen
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
        if role in ("primary", "workers") and command:
            args = [*args, *job.launch.framework_args()]
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
