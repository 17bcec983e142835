"""Per-target settings (GCP project, Azure workspace, Databricks host...) and where they come from.

Each backend declares a `TargetSettings` model. Values are layered, lowest first:

1. the model's defaults;
2. the platform's usual environment variables (`GOOGLE_CLOUD_PROJECT`, `AZURE_SUBSCRIPTION_ID`,
   `DATABRICKS_HOST`...), declared per field with `setting(env=...)`;
3. the job file's `targets.<target>` section;
4. explicit overrides: `--set key=value` on the CLI, keyword arguments in Python.

The environment is below the job file so that an ambient variable never silently redirects a job file that
names its own project or host; `--set` is there for CI pipelines that must.

A handle or a rendered request read from a file is checked against `configured_settings` (environment and
overrides, no job file) before any credential is loaded, since those files travel between machines. No
setting may carry credentials in a URL (`https://user:token@host`): they would be printed and saved.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from crosstrain.errors import Problem, SpecError
from crosstrain.safe import redact, url_credentials

S = TypeVar("S", bound="TargetSettings")


class TargetSettings(BaseModel):
    """Base of every backend's settings model."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    #: Applied to the create call's body by `Backend.render` (so it is in the calls, not in the request's settings).
    patch: dict[str, Any] | None = Field(
        None,
        description="An RFC 7396 JSON merge patch on the body of the create call, for platform fields with no "
        "portable meaning (e.g. {jobSpec: {enableWebAccess: true}} on vertex); checked against the platform's "
        "schema at render. On the command line: --set TARGET.patch='{\"jobSpec\": {...}}'.",
        exclude=True,
    )

    @field_validator("patch", mode="before")
    @classmethod
    def _patch_from_json(cls, value: Any) -> Any:
        """`--set TARGET.patch=JSON` gives the patch as text."""
        if isinstance(value, str):
            import json

            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(f"not JSON ({exc}); write the patch as a JSON object") from None
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _no_url_credentials(cls, value: Any) -> Any:
        """A URL with credentials in any setting is refused: a render prints it and a handle saves it."""
        texts = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        for text in (t for t in texts if isinstance(t, str)):
            if url_credentials(text):
                raise PydanticCustomError(
                    "crosstrain",
                    "{url} carries credentials in the URL; crosstrain would print them in renders and save them "
                    "in handles",
                    {
                        "url": redact(text),
                        "fix": "remove the user:secret@ part and give the credential through the platform's own "
                        "authentication (e.g. DATABRICKS_TOKEN, a ~/.databrickscfg profile, gcloud or az login)",
                    },
                )
        return value


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


def configured_settings(
    model: type[TargetSettings],
    target: str,
    *,
    names: Collection[str],
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The settings in `names` that this machine configures without any job file (the environment, then
    `overrides`), each validated as the model does; unset ones are left out.

    This is what a handle or a rendered request from a file is held to: the file may come from anywhere.
    """
    values: dict[str, Any] = {}
    for name in names:
        for var in env_vars(model, name):
            if environ and environ.get(var):
                values[name] = environ[var]
                break
        if (overrides or {}).get(name) is not None:
            values[name] = (overrides or {})[name]
    problems: list[Problem] = []
    out: dict[str, Any] = {}
    for name, value in values.items():
        try:  # one field at a time: the model's other required fields need not be set
            checked = model.__pydantic_validator__.validate_assignment(model.model_construct(), name, value)
        except ValidationError as exc:
            from crosstrain.loader import problems_from

            problems += problems_from(exc, model, prefix=f"targets.{target}")
            continue
        out[name] = getattr(checked, name)
    if problems:
        raise SpecError(problems)
    return out


def parse_assignments(pairs: list[str]) -> dict[str, str]:
    """`["project=p", "region=us-central1"]` -> dict. Raises SpecError on a pair without `=`."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError([Problem("--set", f"{pair!r} is not key=value", "write e.g. --set project=my-project")])
        out[key.strip().replace("-", "_")] = value
    return out


def scoped(
    assignments: Mapping[str, Any],
    target: str,
    fields: Collection[str],
    known: Collection[str],
    *,
    only_target: bool,
) -> dict[str, Any]:
    """The overrides that apply to `target`: `TARGET.key=value` to that target only, `key=value` to every target
    that has the key, or to the `only_target` a command works on whatever the key (a typo is then reported)."""
    out: dict[str, Any] = {}
    for key, value in assignments.items():
        scope, dot, name = key.partition(".")
        if dot:
            if scope not in known:
                raise SpecError(
                    [Problem(f"--set {key}", f"unknown target {scope!r}", f"use one of {', '.join(sorted(known))}")]
                )
            if scope == target:
                out[name] = value
        elif key in fields or only_target:
            out[key] = value
    return out


def unused(assignments: Mapping[str, Any], targets: Mapping[str, Collection[str]]) -> list[Problem]:
    """`key=value` overrides that no target in play has (a typo, or a setting of a target not checked)."""
    problems = []
    for key in assignments:
        if "." not in key and not any(key in fields for fields in targets.values()):
            problems.append(
                Problem(
                    f"--set {key}",
                    f"none of the targets checked ({', '.join(targets) or 'none'}) has a setting {key!r}",
                    "check the spelling (`crosstrain targets` lists every setting), "
                    "or scope it: --set TARGET.key=value",
                )
            )
    return problems
