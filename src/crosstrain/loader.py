"""Load job specs from YAML or JSON files, text, stdin or dicts, turning every error into `SpecError`."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from crosstrain import untrusted
from crosstrain.errors import Problem, SpecError, closest
from crosstrain.spec import TrainingJob


def read_document(source: str | Path, *, stdin: typing.TextIO | None = None) -> tuple[Any, str]:
    """Parse a YAML/JSON file (or `-` for stdin) within `untrusted.JOB`'s limits. Returns the data and a name for
    messages."""
    text, name = untrusted.read_text(source, untrusted.JOB, stdin=stdin)
    return parse_text(text, name), name


def parse_text(text: str, name: str) -> Any:
    """YAML or JSON text -> data (JSON is YAML, so one parser covers both), within `untrusted.JOB`'s limits."""
    return untrusted.parse_yaml(text, untrusted.JOB, name)


def load_job(source: str | Path | Mapping[str, Any] | TrainingJob) -> TrainingJob:
    """A `TrainingJob` from a file path, `-` (stdin), a dict, or a job (returned as is)."""
    if isinstance(source, TrainingJob):
        return source
    if isinstance(source, Mapping):
        return job_from_dict(source)
    data, name = read_document(source)
    return job_from_dict(data, source=name).loaded_from(source)


def job_from_dict(data: Any, *, source: str | None = None) -> TrainingJob:
    if not isinstance(data, Mapping):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(
            [
                Problem(
                    "",
                    f"a job file holds a mapping of fields, not {kind}",
                    "start from examples/ddp-quickstart/job.yaml",
                )
            ],
            source=source,
        )
    try:
        return TrainingJob.model_validate(dict(data))
    except ValidationError as exc:
        raise SpecError(problems_from(exc, TrainingJob), source=source) from None


#: Problems listed in one error; past that, one more line counts the rest. Alike errors under one parent (unknown
#: fields, list items of the wrong type) past `SAME_KIND` become one problem, so a file with 9,000 unknown keys
#: gets a few lines, not 9,000.
MAX_PROBLEMS = 20
SAME_KIND = 3


def problems_from(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[Problem]:
    """Turn pydantic's errors into problems that name the field path and the fix."""
    groups: dict[tuple[str, str], list[tuple[Any, list[Any]]]] = {}
    for err in exc.errors(include_url=False):
        loc = [part for part in err["loc"] if not _is_validator_tag(part)]
        groups.setdefault((_dotted(loc[:-1]), err["type"]), []).append((err, loc))
    problems: list[Problem] = []
    total = 0
    for group in groups.values():
        alike = len(group) > SAME_KIND
        total += 1 if alike else len(group)
        if len(problems) >= MAX_PROBLEMS:
            continue  # counted, not explained: explaining 20,000 of them would take seconds
        for err, loc in [group[0]] if alike else group:
            path = _dotted([prefix, *loc[: -1 if alike else None]] if prefix else loc[: -1 if alike else None])
            message, fix = _explain(err, model, loc)
            if alike:
                names = ", ".join(untrusted.excerpt(loc[-1], 30) for _, loc in group[:SAME_KIND])
                if err["type"] == "extra_forbidden":
                    known = _fields_at(model, loc[:-1])
                    message = f"{len(group):,} unknown fields: {names}, …"
                    fix = "remove them" + (f"; known fields here: {', '.join(known)}" if known else "")
                else:
                    message = f"{len(group):,} values ({names}, …): {message}"
            problems.append(Problem(path, untrusted.cut(message, 300), untrusted.cut(fix, 300)))
    problems = problems[:MAX_PROBLEMS]
    if total > len(problems):
        more = total - len(problems)
        problems.append(Problem("", f"and {more:,} more problem{'s' if more > 1 else ''}", "fix the ones above first"))
    return problems


def _is_validator_tag(part: Any) -> bool:
    # pydantic adds tags such as 'function-before[...]' or 'int' / 'str' to locations inside unions. A key of
    # the user's own that merely holds a '[' is kept: it is where the problem is.
    return isinstance(part, str) and (bool(_TAG.fullmatch(part)) or part in ("int", "str", "float"))


_TAG = re.compile(
    r"(function-(before|after|wrap|plain)|tagged-union|union|literal|list|dict|nullable|lax-or-strict|"
    r"json-or-python|chain|model|default|definition-ref)\[.*\]",
    re.DOTALL,
)


def _dotted(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = untrusted.excerpt(part, 40)[1:-1] if isinstance(part, str) and len(part) > 40 else str(part)
            text = text or '""'  # an empty key still needs a place in the path
            out += f".{text}" if out else text
    return out


def _explain(err: Any, model: type[BaseModel], loc: list[Any]) -> tuple[str, str]:
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "crosstrain":
        return err["msg"], str(ctx.get("fix", ""))
    if kind == "extra_forbidden":
        name = str(loc[-1]) if loc else ""
        known = _fields_at(model, loc[:-1])
        close = closest(name, known)
        hint = f"did you mean {close!r}?" if close else f"remove it; known fields here: {', '.join(known)}"
        return f"unknown field {untrusted.excerpt(name)}", hint
    if kind == "missing":
        return "required field is missing", f"add `{loc[-1]}:`" if loc else "add it"
    if kind == "value_error" and "; " in str(ctx.get("error", "")):
        # A validator's plain ValueError says "what is wrong; how to fix it".
        what, _, how = str(ctx["error"]).partition("; ")
        return what, how
    message = err["msg"]
    if "input" in err and kind not in ("model_type", "dict_type"):
        message = f"{message} (got {untrusted.excerpt(err['input'])})"
    fixes = {
        "greater_than_equal": f"use a value of at least {ctx.get('ge')}",
        "greater_than": f"use a value above {ctx.get('gt')}",
        "less_than_equal": f"use a value of at most {ctx.get('le')}",
        "literal_error": f"use one of {ctx.get('expected')}",
        "int_parsing": "use a whole number",
        "int_type": "use a whole number",
        "int_from_float": "use a whole number",
        "int_parsing_size": "use a smaller whole number",
        "finite_number": "use a finite number",
        "float_parsing": "use a number",
        "float_type": "use a number",
        "string_pattern_mismatch": f"use a value that matches {ctx.get('pattern')}",
        "bool_parsing": "use true or false",
        "bool_type": "use true or false",
        "string_type": "quote the value",
        "list_type": "use a list, e.g. [a, b]",
        "dict_type": "use a mapping of names to values",
        "model_type": "use a mapping of fields",
        "model_attributes_type": "use a mapping of fields",
        "union_tag_invalid": f"use one of {ctx.get('expected_tags')} as its {ctx.get('discriminator')}",
        "union_tag_not_found": f"add its {ctx.get('discriminator')}, the field that says which kind it is "
        "(`crosstrain schema` lists the kinds)",
    }
    return message, fixes.get(kind, "see `crosstrain schema` for the expected form")


def _fields_at(model: type[BaseModel], loc: list[Any]) -> list[str]:
    """Field names of the model found by walking `loc` from `model` (for 'did you mean' hints)."""
    current: Any = model
    for part in loc:
        current = _model_in(current)
        if current is None or not isinstance(part, str) or part not in current.model_fields:
            return []
        current = current.model_fields[part].annotation
    found = _model_in(current)
    return list(found.model_fields) if found else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found:
                return found
    return None
