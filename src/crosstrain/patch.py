"""`targets.<target>.patch`: an RFC 7396 JSON merge patch on the body of a target's create call.

The escape hatch for platform fields with no portable meaning (Vertex AI's `enableWebAccess`, Azure ML's
`services`, a Databricks cluster policy...). It is applied after rendering, so the dry run shows it and the
fingerprint covers it, and checked at render against the platform's own schema (each platform package's `schema.json`,
derived from the platform's SDK by `crosstrain.schemas.generate`): an unknown field, a value of the wrong type or
an unknown enum value is an error at `targets.<target>.patch.<path>` before anything is sent. Only the standard
library is imported here: rendering loads no cloud SDK.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any

from crosstrain.errors import Problem, closest

#: A path into a body: object keys and list indices.
Path = tuple[str | int, ...]

_INT64 = re.compile(r"-?\d+")
_DURATION = re.compile(r"-?\d+(\.\d{1,9})?s")
_ISO_DURATION = re.compile(
    r"-?P(?!$)(\d+(\.\d+)?Y)?(\d+(\.\d+)?M)?(\d+(\.\d+)?W)?(\d+(\.\d+)?D)?(T(?=\d)(\d+(\.\d+)?H)?(\d+(\.\d+)?M)?(\d+(\.\d+)?S)?)?"
)
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
_FORMATS = {
    "int64": (_INT64, 'a whole number as a string, e.g. "4"'),
    "duration": (_DURATION, 'a duration in seconds, e.g. "3600s"'),
    "iso-duration": (_ISO_DURATION, 'an ISO 8601 duration, e.g. "PT1H"'),
    "timestamp": (_TIMESTAMP, 'an RFC 3339 timestamp, e.g. "2026-01-01T00:00:00Z"'),
}


def merge(target: Any, patch: Any) -> Any:
    """RFC 7396 MergePatch(target, patch): objects merge key by key, `null` removes a key, anything else
    (lists included) replaces. Neither argument is changed.

    One extension: a mapping keyed by positions (`{"0": {...}}`) on a list merges into those elements, so one
    field of Vertex AI's first worker pool or of a Databricks task can be set without restating the list."""
    if isinstance(target, list) and _positions(patch, target):
        out_list = list(target)
        for key, value in patch.items():
            out_list[int(key)] = merge(out_list[int(key)], value)
        return out_list
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def _positions(patch: Any, target: list[Any]) -> bool:
    """Whether `patch` patches elements of the list `target` by position."""
    return (
        isinstance(patch, dict)
        and bool(patch)
        and all(isinstance(k, str) and k.isdigit() and int(k) < len(target) for k in patch)
        and all(v is not None for v in patch.values())
    )


@cache
def schema(package: str) -> dict[str, Any]:
    """A platform's create-body schema: its package's `schema.json`, shipped with crosstrain."""
    text = resources.files(package).joinpath("schema.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]


def problems(
    platform: str,
    patch: Mapping[str, Any],
    body: Any,
    prefix: str,
    owned: Mapping[Path, str],
    kept: Mapping[Path, str] | None = None,
) -> list[Problem]:
    """Every way `patch` departs from the platform's schema (a required field removed included), changes what
    crosstrain owns (`owned`: path in the body -> why crosstrain needs it), or removes what the render's plan
    put there (`kept`: the same, for fields whose value a patch may change), each at `prefix.<path in the patch>`;
    `body` is the rendered one. In `owned` and `kept`, "*" stands for every element of the rendered list."""
    found: list[Problem] = []
    doc = schema(platform)
    checker = _Checker(doc["types"], bool(doc.get("case_insensitive_enums")), found)
    merged = merge(body, patch)
    checker.check(patch, merged, {"$ref": doc["root"]}, prefix, patched=True)
    for pattern, why in owned.items():
        for path in _expand(body, pattern):
            if _get(body, path) != _get(merged, path):
                found.append(
                    Problem(
                        prefix + _dotted(_touched(patch, path)),
                        f"changes {_dotted(path).lstrip('.')}, which crosstrain owns: {why}",
                        "leave it out of the patch",
                    )
                )
    for pattern, why in (kept or {}).items():
        for path in _expand(body, pattern):
            if _get(body, path) is not None and _get(merged, path) is None:
                found.append(
                    Problem(
                        prefix + _dotted(_touched(patch, path)),
                        f"removes {_dotted(path).lstrip('.')}, which the job's plan needs: {why}",
                        "patch the fields inside it, or change the job itself",
                    )
                )
    return found


#: Overrides said one by one; past this many, one more note counts the rest.
MAX_OVERRIDE_NOTES = 12


def overrides(body: Any, patch: Any, prefix: str) -> list[str]:
    """A note for every value the render put in `body` that `patch` changes or removes: the plan built it from
    the job, and the patch overrides it, which the render must say (a patch that adds a field says nothing)."""
    merged = merge(body, patch)
    changed = [(path, old) for path, old in _leaves(body) if _get(merged, path) != old]
    notes = []
    for path, old in changed[:MAX_OVERRIDE_NOTES]:
        new = _get(merged, path)
        what = "removes" if new is None else f"sets it to {_shown(new)} over"
        notes.append(f"{prefix} overrides {_dotted(path).lstrip('.')}: it {what} {_shown(old)}, from the job's plan")
    if len(changed) > MAX_OVERRIDE_NOTES:
        notes.append(f"{prefix} overrides {len(changed) - MAX_OVERRIDE_NOTES} more rendered value(s)")
    return notes


def _leaves(value: Any, path: Path = ()) -> list[tuple[Path, Any]]:
    """Every scalar in a JSON value, with its path."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(item, (*path, key))]
    if isinstance(value, list):
        return [leaf for index, item in enumerate(value) for leaf in _leaves(item, (*path, index))]
    return [(path, value)]


def _expand(body: Any, pattern: Path) -> list[Path]:
    """`pattern`'s paths in `body`, each "*" standing for every index of the list found there."""
    paths: list[Path] = [()]
    for part in pattern:
        if part != "*":
            paths = [(*path, part) for path in paths]
            continue
        paths = [
            (*path, index)
            for path in paths
            if isinstance(found := _get(body, path), list)
            for index in range(len(found))
        ]
    return paths


class _Checker:
    def __init__(self, types: Mapping[str, Any], case_insensitive: bool, found: list[Problem]) -> None:
        self.types = types
        self.case_insensitive = case_insensitive
        self.found = found

    def resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in node:
            node = self.types[node["$ref"]]
        return node

    def check(self, value: Any, merged: Any, node: Mapping[str, Any], path: str, *, patched: bool) -> None:
        """`patched`: `value` is a merge patch (null removes); otherwise a whole value (inside a list)."""
        node = self.resolve(node)
        kind = node["type"]
        if value is None:
            if not patched:
                self.bad(path, "null inside a list is sent as it is", "leave the field out instead")
            return
        if kind == "any":
            return
        if kind == "object":
            self.object(value, merged, node, path, patched=patched)
        elif kind == "array":
            if isinstance(value, dict) and patched:
                if isinstance(merged, list):
                    self.positions(value, merged, node, path)
                else:
                    self.bad(
                        path,
                        "a mapping on a list patches elements by position, and names no element of the rendered "
                        f"list ({', '.join(map(repr, value))})",
                        'use positions of the rendered list (`crosstrain render` shows it), e.g. {"0": {...}}, '
                        "or give the whole list",
                    )
                return
            if not isinstance(value, list):
                self.bad(path, f"expected a list, not {_kind(value)}", "a patch replaces a list whole: give all of it")
                return
            for index, item in enumerate(value):
                self.check(item, item, node["items"], f"{path}[{index}]", patched=False)
        elif kind == "string":
            self.string(value, node, path)
        elif kind == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                self.bad(path, f"expected a whole number, not {_kind(value)}", "write a number such as 4")
        elif kind == "number":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                self.bad(path, f"expected a number, not {_kind(value)}", "write a number such as 0.5")
        elif kind == "boolean" and not isinstance(value, bool):
            self.bad(path, f"expected true or false, not {_kind(value)}", "write true or false")

    def object(self, value: Any, merged: Any, node: Mapping[str, Any], path: str, *, patched: bool) -> None:
        if not isinstance(value, dict):
            self.bad(path, f"expected a mapping, not {_kind(value)}", "write the field's own fields as a mapping")
            return
        merged = merged if isinstance(merged, dict) else {}
        properties: dict[str, Any] = dict(node.get("properties") or {})
        read_only = set(node.get("read_only") or ())
        required = set(node.get("required") or ())
        variants = (node.get("discriminator") or {}).get("variants")
        if variants:
            prop = node["discriminator"]["property"]
            chosen = self.enum_match(merged.get(prop), list(variants))
            if chosen is None:
                self.bad(
                    f"{path}.{prop}",
                    f"{_shown(merged.get(prop))} is not one of {', '.join(variants)}",
                    f"set {prop} to the kind this is",
                )
                return
            variant = self.resolve({"$ref": variants[chosen]})
            properties.update(variant.get("properties") or {})
            read_only |= set(variant.get("read_only") or ())
            required |= set(variant.get("required") or ())
        values = node.get("values")
        for key, item in value.items():
            where = f"{path}.{key}"
            if key in properties:
                if key in read_only:
                    self.bad(where, "is output only: the platform sets it", "leave it out of the patch")
                    continue
                self.check(item, merged.get(key), properties[key], where, patched=patched)
            elif values is not None:
                self.check(item, merged.get(key), values, where, patched=patched)
            else:
                known = sorted(k for k in properties if k not in read_only)
                close = closest(key, known)
                self.bad(
                    where,
                    f"unknown field {key!r}" + (f" (did you mean {close!r}?)" if close else ""),
                    f"use one of {', '.join(known)}" if known else "this field takes no fields",
                )
        for key in sorted(required - read_only):
            if merged.get(key) not in (None, []):
                continue
            if patched and key in value:  # the patch removes it (null) or empties it
                self.bad(f"{path}.{key}", "removes a field the platform requires", "patch the fields inside it instead")
            elif not patched:  # an element the patch writes whole
                self.bad(f"{path}.{key}", "is missing, and the platform requires it", "add it")

    def positions(self, value: dict[str, Any], merged: list[Any], node: Mapping[str, Any], path: str) -> None:
        """A mapping of positions on a list (see `merge`): each must name an element, and patch it."""
        for key, item in value.items():
            where = f"{path}[{key}]"
            if not key.isdigit() or int(key) >= len(merged):
                self.bad(
                    where,
                    f"{key!r} is not the position of an element (the list has {len(merged)})",
                    f"use a position from 0 to {len(merged) - 1}, or give the whole list",
                )
            elif item is None:
                self.bad(where, "an element cannot be removed by null", "give the whole list without it")
            else:
                self.check(item, merged[int(key)], node["items"], where, patched=True)

    def string(self, value: Any, node: Mapping[str, Any], path: str) -> None:
        fmt = node.get("format")
        if not isinstance(value, str):
            hint = _FORMATS[fmt][1] if fmt in _FORMATS else "quote it"
            self.bad(path, f"expected a string, not {_kind(value)}", f"write {hint}")
            return
        enum = node.get("enum")
        if enum and self.enum_match(value, enum) is None:
            close = closest(value, enum)
            self.bad(
                path,
                f"{value!r} is not a value it takes" + (f" (did you mean {close!r}?)" if close else ""),
                f"use one of {', '.join(enum)}",
            )
        elif fmt in _FORMATS and not _FORMATS[fmt][0].fullmatch(value):
            self.bad(path, f"{value!r} is not {_FORMATS[fmt][1]}", f"write {_FORMATS[fmt][1]}")

    def enum_match(self, value: Any, options: Sequence[str]) -> str | None:
        if not isinstance(value, str):
            return None
        if value in options:
            return value
        if self.case_insensitive:
            return next((o for o in options if o.lower() == value.lower()), None)
        return None

    def bad(self, path: str, message: str, fix: str) -> None:
        self.found.append(Problem(path, message, fix))


def _get(value: Any, path: Path) -> Any:
    for part in path:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and part < len(value) else None
        else:
            value = value.get(part) if isinstance(value, dict) else None
    return value


def _touched(patch: Any, path: Path) -> Path:
    """The part of `path` the patch sets (a list is replaced whole; a null removes all below it)."""
    done: list[str | int] = []
    for part in path:
        key = str(part) if isinstance(part, int) else part
        if not isinstance(patch, dict) or key not in patch:
            break
        done.append(part)
        patch = patch[key]
    return tuple(done)


def _dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {_shown(value)}"
    return "a list" if isinstance(value, list) else "a mapping" if isinstance(value, dict) else type(value).__name__


def _shown(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:60] + "..."
