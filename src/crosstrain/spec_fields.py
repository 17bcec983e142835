"""The parts a job spec is built from: the model base and its error helpers, durations, commands, machines,
environment values and secret references, and data locations. `crosstrain.spec` assembles them into pools and
the `TrainingJob`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from crosstrain import catalog, locations
from crosstrain.secrets import SECRET_FORMS_TEXT, match_reference, schema_pattern

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?")


def no_items() -> list[Any]:
    """An empty list, as a field's default factory: pydantic reads a factory's signature, and `list`'s is text
    that `inspect` tokenizes (compiling the tokenizer's expressions costs a cold render 3 ms)."""
    return []


def invalid(message: str, fix: str) -> PydanticCustomError:
    """A validation error whose context carries the fix, which `crosstrain.loader` shows under the message."""
    return PydanticCustomError("crosstrain", message.replace("{", "{{").replace("}", "}}"), {"fix": fix})


def error_at(loc: tuple[str | int, ...], value: Any, message: str, fix: str) -> InitErrorDetails:
    """An `invalid` error at the field path `loc`, for validators that check several fields at once."""
    return InitErrorDetails(type=PydanticCustomError("crosstrain", message, {"fix": fix}), loc=loc, input=value)


#: The longest duration a job may ask for: a year and a day, in seconds. Far beyond any training run, and within
#: every platform's encoding (Databricks takes an int32 of seconds, Google a protobuf Duration).
MAX_DURATION = 366 * 86400
_DURATION_FIX = 'write seconds (3600) or a duration such as "90m", "24h", "1h30m"'


def parse_duration(value: Any) -> Any:
    """`90`, `"90s"`, `"15m"`, `"24h"`, `"7d"`, `"1h30m"` -> whole seconds."""
    if value is None:
        return value
    if isinstance(value, bool):  # pydantic would take true as 1 second
        raise invalid(f"{value!r} is not a duration", _DURATION_FIX)
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
                raise invalid(f"{shown!r} is longer than a job may run", f"use at most {MAX_DURATION} (366d)")
            return round(seconds)
        if re.fullmatch(r"\d+", text):
            if len(text) <= 12:
                return int(text)  # the bound below refuses what is too long
            raise invalid(f"{value[:40]!r}... is longer than a job may run", f"use at most {MAX_DURATION} (366d)")
    raise invalid(f"{value!r} is not a duration", _DURATION_FIX)


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
        raise invalid(
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


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Accelerator(SpecModel):
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
            raise invalid(*catalog.unknown_gpu(value))
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
            raise invalid(f"{shown!r} is not GPU:COUNT", "write the portable form as e.g. A100:8")
        return {"accelerator": {"type": kind, "count": int(count) if count else 1}}
    return {"type": value}


class Machine(SpecModel):
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
            raise invalid(
                "accelerator.count is set but accelerator.type is missing",
                f"add accelerator.type (one of {', '.join(catalog.gpu_names())}), or write e.g. `machine: A100:8`",
            )
        return data

    @property
    def gpus(self) -> int:
        return self.accelerator.count if self.accelerator else 0


MachineField = Annotated[Machine, BeforeValidator(_parse_machine, json_schema_input_type=str | Machine)]


class BootDisk(SpecModel):
    type: str | None = Field(None, description="Disk type where the platform lets you choose (pd-ssd, pd-standard).")
    size_gb: int | None = Field(None, ge=10, le=65536)


class SecretRef(SpecModel):
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
            raise invalid(f"{shown!r} is not a secret reference", f"write {SECRET_FORMS_TEXT}")
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
            raise invalid(
                f"an environment value is a string, or a mapping whose one key is `secret`, not a mapping of "
                f"{sorted(map(str, value))}",
                f"write {{secret: REF}} with REF {SECRET_FORMS_TEXT}",
            )
        return SecretRef.model_validate(value)
    raise invalid(
        f"{value!r} is not a string" if not isinstance(value, list | tuple) else "an environment value is not a list",
        "quote the value, or write {secret: REF} to name a secret",
    )


EnvValue = Annotated[
    str | SecretRef,
    BeforeValidator(_env_value, json_schema_input_type=str | SecretRef),
    Field(description="A value, or `{secret: REF}`: a secret's reference, resolved on the node."),
]
Env = dict[str, EnvValue]


DATA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
#: `${inputs.NAME}` / `${outputs.NAME}` in a command, an argument or an environment value.
DATA_REFERENCE = re.compile(r"\$\{(inputs|outputs)\.([^{}]*)\}")
#: Azure ML's own spelling, `${{inputs.NAME}}`, which each target renders from the portable one.
AZURE_REFERENCE = re.compile(r"\$\{\{\s*(inputs|outputs)\.([^{}]*?)\s*\}\}")


def check_bucket(value: str, shown: str) -> None:
    """A gs:// location names a bucket Cloud Storage could hold, on every target."""
    why = locations.bucket_problem(value) if value.startswith("gs://") else None
    if why:
        raise invalid(f"{shown!r} is not a Cloud Storage location: {why}", "write gs://BUCKET/PATH, BUCKET as named")


def _data_location(value: Any) -> Any:
    """The short form, a path, is `{path: PATH}`."""
    return {"path": value} if isinstance(value, str) else value


class _DataLocation(SpecModel):
    path: str | None = Field(
        None,
        description="Where the data is: gs://BUCKET/PATH, azureml:NAME:VERSION or azureml:NAME@latest (a "
        "registered data asset), azureml://..., abfss://..., https://ACCOUNT.blob.core.windows.net/..., "
        "s3://..., /Volumes/..., dbfs:/..., or a local path (relative to the job file: the local target reads it, "
        "Azure ML uploads an input's).",
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
            raise invalid(f"{shown!r} is not a data location", f"write {locations.FORMS_TEXT}")
        scheme, sep, rest = value.partition("://")
        if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme) and scheme.lower() not in locations.SCHEMES:
            raise invalid(f"{shown!r}: crosstrain reads no {scheme}:// locations", f"write {locations.FORMS_TEXT}")
        if sep and not rest.strip("/"):
            raise invalid(f"{shown!r} names no bucket, container or path", f"write {locations.FORMS_TEXT}")
        if value.startswith("azureml:") and not value.startswith("azureml://") and not locations.ASSET.fullmatch(value):
            raise invalid(
                f"{shown!r} is not a registered data asset",
                "write azureml:NAME:VERSION or azureml:NAME@latest (or an azureml://datastores/... URI)",
            )
        if value.startswith("dbfs:") and not value.startswith("dbfs:/"):
            raise invalid(f"{shown!r} is not a DBFS path", "write dbfs:/PATH")
        check_bucket(value, shown)
        return value

    @model_validator(mode="after")
    def _type_fits_path(self) -> _DataLocation:
        path = self.path or ""
        if self.type == "file" and (path.endswith("/") or re.fullmatch(r"[A-Za-z0-9]+://[^/]+/?", path)):
            raise invalid(
                f"{path!r} names a folder (or a bucket), and the type is file",
                "name the file (gs://bucket/data/train.csv), or use type: folder",
            )
        if self.type in locations.AZURE_TYPES and path and locations.kind(path) not in locations.TABLE_KINDS:
            raise invalid(
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

    outside_job_folder: bool = Field(
        False,
        description="Upload a local path although it is outside the job file's folder (through '..', an absolute "
        "path or a symlink), where a target uploads local data (Azure ML). Without it such a path is refused there, "
        "so a job file cannot upload e.g. ~/.aws unnoticed.",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _mode(cls, value: Any) -> Any:
        return _check_mode(value, "inputs")

    @model_validator(mode="after")
    def _outside_is_local(self) -> DataInput:
        if self.outside_job_folder and locations.kind(self.path or "") != "local":
            raise invalid(
                f"outside_job_folder is for a local path, and {self.path!r} is not one",
                "remove outside_job_folder",
            )
        return self


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
    raise invalid(why, f"use one of {', '.join(locations.MODES[direction])} (default: mount)")


DataInputField = Annotated[DataInput, BeforeValidator(_data_location, json_schema_input_type=str | DataInput)]
DataOutputField = Annotated[DataOutput, BeforeValidator(_data_location, json_schema_input_type=str | DataOutput)]


class Alternative(SpecModel):
    """One alternative of a job's `fallback:`: where to try the job when the places before it have no quota or
    capacity for it. Each field changes the primary (the job as written); what it leaves out stays as written."""

    target: str | None = Field(None, description="The target to try (default: the primary's).")
    region: str | None = Field(
        None, description="The target's region setting (targets.<target>.region) for this alternative."
    )
    machine: MachineField | None = Field(
        None, description="The machine of the primary and the workers for this alternative, e.g. A100-80GB:8."
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Target settings for this alternative, over the job's targets.<target> section.",
    )

    @model_validator(mode="after")
    def _changes_something(self) -> Alternative:
        if self.target is None and self.region is None and self.machine is None and not self.settings:
            raise invalid(
                "this alternative changes nothing, so it would try the same place again",
                "give it a target, region, machine or settings",
            )
        return self
