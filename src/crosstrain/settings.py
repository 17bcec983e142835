"""Per-target settings (GCP project, Azure workspace, Databricks host...) and where they come from.

Each backend declares a `TargetSettings` model. Values are layered, lowest first:

1. the model's defaults;
2. the platform's usual environment variables (`GOOGLE_CLOUD_PROJECT`, `AZURE_SUBSCRIPTION_ID`,
   `DATABRICKS_HOST`...), declared per field with `setting(env=...)`;
3. the job file's `targets.<target>` section;
4. explicit overrides: `--set key=value` on the CLI, keyword arguments in Python.

The environment is below the job file so that an ambient variable never silently redirects a job file that
names its own project or host; `--set` is there for CI pipelines that must.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crosstrain.errors import Problem, SpecError

S = TypeVar("S", bound="TargetSettings")


class TargetSettings(BaseModel):
    """Base of every backend's settings model."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


def setting(default: Any = ..., *, description: str, env: tuple[str, ...] = ()) -> Any:
    """A settings field, optionally filled from the first of `env` that is set."""
    extra: dict[str, Any] = {"env": list(env)} if env else {}
    if env:
        description = f"{description} Env: {', '.join(env)}."
    return Field(default, description=description, json_schema_extra=extra or None)


def env_vars(model: type[TargetSettings], name: str) -> list[str]:
    extra = model.model_fields[name].json_schema_extra
    return list(extra.get("env", [])) if isinstance(extra, dict) else []  # type: ignore[arg-type]


def resolve_settings(
    model: type[S],
    target: str,
    *,
    section: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> S:
    """Layer defaults < environment < job file < overrides, and validate. Errors name `targets.<target>.<key>`."""
    values: dict[str, Any] = {}
    for name in model.model_fields:
        for var in env_vars(model, name):
            if environ and environ.get(var):
                values[name] = environ[var]
                break
    values.update(section or {})
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        from crosstrain.loader import problems_from

        problems = problems_from(exc, model, prefix=f"targets.{target}")
        for i, p in enumerate(problems):
            if p.message == "required field is missing":
                key = p.path.rsplit(".", 1)[-1]
                hint = [f"`--set {key}=...`", f"`targets.{target}.{key}` in the job file"]
                hint += [f"${v}" for v in env_vars(model, key)] if key in model.model_fields else []
                problems[i] = Problem(p.path, f"{target} needs `{key}`", "set it with " + ", ".join(hint))
        raise SpecError(problems) from None


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["project=p", "region=us-central1"]` -> dict. Raises SpecError on a pair without `=`."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError([Problem("--set", f"{pair!r} is not key=value", "write e.g. --set project=my-project")])
        out[key.strip().replace("-", "_")] = value
    return out
