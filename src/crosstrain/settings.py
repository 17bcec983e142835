"""Per-target settings (GCP project, Azure workspace, Databricks host...) and where they come from.

Each backend declares a `TargetSettings` model. Values are layered, lowest first, by `sourced` alone:

1. the model's defaults;
2. this user's config file, `[targets.<target>]` (`crosstrain.userconfig`: `~/.config/crosstrain/config.toml`);
3. the config file's profile in use, `[profiles.<name>.targets.<target>]` (`--profile`, `$CROSSTRAIN_PROFILE`);
4. the platform's usual environment variables (`GOOGLE_CLOUD_PROJECT`, `AZURE_SUBSCRIPTION_ID`,
   `DATABRICKS_HOST`...), declared per field with `setting(env=...)`;
5. the job file's `targets.<target>` section;
6. explicit overrides: `--set key=value` on the CLI, keyword arguments in Python.

The environment is below the job file so that an ambient variable never silently redirects a job file that
names its own project or host; `--set` is there for CI pipelines that must. The config file is below the
environment, as gcloud's properties are below `CLOUDSDK_*` variables: a variable set for one command wins over
the standing default. Each value keeps where it came from (`sourced`), which `crosstrain targets` shows.

A handle or a rendered request read from a file is checked against `configured_settings` (the config file, the
environment and overrides, no job file) before any credential is loaded, since those files travel between
machines. No setting may carry credentials in a URL (`https://user:token@host`): they would be printed and saved.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from crosstrain.errors import ConfigError, Problem, SpecError, closest
from crosstrain.safe import redact, url_credentials

if TYPE_CHECKING:
    from crosstrain.userconfig import Layer

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


#: Where a value came from, as `crosstrain targets` shows it.
DEFAULT, JOB_FILE, OVERRIDE = "default", "job file", "--set"


def sourced(
    model: type[TargetSettings],
    *,
    config: Sequence[Layer] = (),
    section: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, tuple[Any, str]]:
    """Each setting given, as (value, where it came from): the one place that says which source wins. Lowest
    first: the config file's tables (its defaults, then the profile's), the environment, the job file, `--set`.
    Settings given nowhere are left out (the model's defaults fill them)."""
    values: dict[str, tuple[Any, str]] = {}
    for layer in config:
        values.update((key, (value, layer.origin)) for key, value in layer.values.items())
    for name in model.model_fields:
        for var in env_vars(model, name):
            if environ and environ.get(var):
                values[name] = (environ[var], f"env {var}")
                break
    values.update((key, (value, JOB_FILE)) for key, value in (section or {}).items())
    values.update((key, (value, OVERRIDE)) for key, value in (overrides or {}).items() if value is not None)
    return values


def resolve_settings(
    model: type[S],
    target: str,
    *,
    section: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config: Sequence[Layer] = (),
) -> S:
    """Layer the sources (`sourced`) and validate. Errors name `targets.<target>.<key>`; a value from anywhere
    but the job file says where it came from, and the config file's are checked first, naming the file."""
    check_config(model, config)
    given = sourced(model, config=config, section=section, overrides=overrides, environ=environ)
    try:
        return model.model_validate({key: value for key, (value, _) in given.items()})
    except ValidationError as exc:
        from crosstrain.loader import problems_from

        problems = problems_from(exc, model, prefix=f"targets.{target}")
        for i, p in enumerate(problems):
            key = p.path.rsplit(".", 1)[-1]
            if p.message == "required field is missing":
                hint = [f"`--set {key}=...`", f"`targets.{target}.{key}` in the job file"]
                hint += [f"${v}" for v in env_vars(model, key)] if key in model.model_fields else []
                hint += [f"`crosstrain config set {target}.{key} VALUE`"]
                problems[i] = Problem(p.path, f"{target} needs `{key}`", "set it with " + ", ".join(hint))
            elif p.path == f"targets.{target}.{key}" and given.get(key, (None, JOB_FILE))[1] != JOB_FILE:
                origin = given[key][1]
                said = "given as an override: --set, or settings passed in Python" if origin == OVERRIDE else origin
                problems[i] = Problem(p.path, f"{p.message} ({said})", p.fix)
        raise SpecError(problems) from None


def check_config(model: type[TargetSettings], config: Iterable[Layer]) -> None:
    """Refuse the config file's tables for this target where a key is no setting or a value does not fit."""
    layers = list(config)
    problems = config_problems(model, layers)
    if problems:
        raise ConfigError(problems, source=layers[0].source)


def config_problems(model: type[TargetSettings], config: Iterable[Layer]) -> list[Problem]:
    """Each key of the config file's tables that is no setting of the target (with the closest one), and each
    value the model refuses, at its key path in the file (`targets.vertex.regoin`)."""
    problems: list[Problem] = []
    for layer in config:
        for name, value in layer.values.items():
            problems += check_setting(model, layer.target, name, value, at=layer.at)[1]
    return problems


def check_setting(
    model: type[TargetSettings], target: str, name: str, value: Any, *, at: str
) -> tuple[Any, list[Problem]]:
    """`value` as `model`'s setting `name` takes it, or the problems with it, at `at.name`."""
    if name not in model.model_fields:
        from crosstrain import untrusted

        close = closest(name, model.model_fields)
        fix = f"did you mean {close!r}?" if close else f"use one of its settings: {', '.join(model.model_fields)}"
        path = f"{at}.{name}" if len(name) <= 40 else f"{at}.{untrusted.excerpt(name, 40)}"
        return None, [
            Problem(
                path, f"{target} has no setting {untrusted.excerpt(name)}", f"{fix} (`crosstrain targets -t {target}`)"
            )
        ]
    try:
        checked = model.__pydantic_validator__.validate_assignment(model.model_construct(), name, value)
    except ValidationError as exc:
        from crosstrain.loader import problems_from

        return None, problems_from(exc, model, prefix=at)
    return getattr(checked, name), []


def described(model: type[TargetSettings], target: str, given: Mapping[str, tuple[Any, str]]) -> list[dict[str, Any]]:
    """Each setting of `model` as `crosstrain targets` shows it: its value and origin in `given` (`sourced`), else
    its default (origin `default`; None where it is required and unset), and every way to set it."""
    rows = []
    for key, field in model.model_fields.items():
        sources = [f"--set {target}.{key}=...", f"targets.{target}.{key} in the job file"]
        sources += [f"${var}" for var in env_vars(model, key)] + [f"crosstrain config set {target}.{key} VALUE"]
        default = None if field.is_required() else _plain(field.get_default(call_default_factory=True))
        value, origin = given.get(key, (default, None if field.is_required() else DEFAULT))
        description = (field.description or "").split(" Env: ")[0]
        rows.append(
            {
                "name": key,
                "required": field.is_required(),
                "default": default,
                "description": description,
                "value": _plain(value),
                "origin": origin,
                "from": sources,
            }
        )
    return rows


def _plain(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool | type(None) | list | dict) else str(value)


def configured_settings(
    model: type[TargetSettings],
    target: str,
    *,
    names: Collection[str],
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config: Sequence[Layer] = (),
) -> dict[str, Any]:
    """The settings in `names` that this machine configures without any job file (the config file, the
    environment, then `overrides`, as `sourced` layers them), each validated as the model does; unset ones are
    left out.

    This is what a handle or a rendered request from a file is held to: the file may come from anywhere.
    """
    check_config(model, config)
    given = sourced(model, config=config, overrides=overrides, environ=environ)
    problems: list[Problem] = []
    out: dict[str, Any] = {}
    for name in names:
        if name not in given:
            continue
        checked, found = check_setting(model, target, name, given[name][0], at=f"targets.{target}")
        problems += found
        if not found:
            out[name] = checked
    if problems:
        raise SpecError(problems)
    return out


def parse_assignments(pairs: list[str], flag: str = "--set") -> dict[str, str]:
    """`["project=p", "region=us-central1"]` -> dict. Raises SpecError on a pair without `=`."""
    out: dict[str, str] = {}
    example = "--set project=my-project" if flag == "--set" else f"{flag} data=./sample"
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError([Problem(flag, f"{pair!r} is not key=value", f"write e.g. {example}")])
        # A setting's dashes are underscores (`workspace-dir`); a target's are its own (`databricks-air.host`).
        scope, dot, name = key.strip().rpartition(".")
        out[f"{scope}{dot}{name.replace('-', '_')}"] = value
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
