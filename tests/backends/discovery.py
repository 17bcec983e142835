"""Strict checks of request bodies against the discovery documents bundled with google-api-python-client.

Stricter than the APIs themselves on purpose: lowerCamelCase names only, no output-only (readOnly) fields,
enums by name, int64 as strings, durations as `"<seconds>s"`. A body that passes is what the API documents.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

DURATION = re.compile(r"^-?\d+(\.\d{1,9})?s$")
INT64 = re.compile(r"^-?\d+$")
DATETIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


@cache
def document(name: str) -> dict[str, Any]:
    """A bundled discovery document, e.g. `aiplatform.v1` or `ml.v1`."""
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / f"{name}.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def violations(doc: str, schema: str, value: Any) -> list[str]:
    """Every way `value` departs from the schema `schema` of discovery document `doc` (empty when it conforms)."""
    found: list[str] = []
    _check(document(doc)["schemas"], {"$ref": schema}, value, schema, found)
    return found


def assert_conforms(doc: str, schema: str, value: Any) -> None:
    problems = violations(doc, schema, value)
    assert not problems, "\n".join(problems)


def _check(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str, found: list[str]) -> None:
    if "$ref" in spec:
        spec = schemas[spec["$ref"]]
    kind, fmt = spec.get("type"), spec.get("format")
    if kind == "any":
        return
    if kind == "object":
        if not isinstance(value, dict):
            found.append(f"{path}: expected an object, got {type(value).__name__}")
            return
        properties: dict[str, Any] = spec.get("properties", {})
        extra = spec.get("additionalProperties")
        for key, item in value.items():
            child = f"{path}.{key}"
            if key in properties:
                if properties[key].get("readOnly"):
                    found.append(f"{child}: output-only field")
                _check(schemas, properties[key], item, child, found)
            elif extra is not None:
                _check(schemas, extra, item, child, found)
            else:
                found.append(f"{child}: unknown field (known: {', '.join(sorted(properties))})")
    elif kind == "array":
        if not isinstance(value, list):
            found.append(f"{path}: expected an array, got {type(value).__name__}")
            return
        for index, item in enumerate(value):
            _check(schemas, spec["items"], item, f"{path}[{index}]", found)
    elif kind == "string":
        if not isinstance(value, str):
            found.append(f"{path}: expected a string ({fmt or 'text'}), got {value!r}")
        elif "enum" in spec and value not in spec["enum"]:
            found.append(f"{path}: {value!r} is not one of {spec['enum']}")
        elif fmt in ("int64", "uint64") and not INT64.match(value):
            found.append(f"{path}: {value!r} is not an {fmt} string")
        elif fmt == "google-duration" and not DURATION.match(value):
            found.append(f"{path}: {value!r} is not a duration like '3600s'")
        elif fmt == "google-datetime" and not DATETIME.match(value):
            found.append(f"{path}: {value!r} is not an RFC 3339 timestamp")
    elif kind == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            found.append(f"{path}: expected an integer, got {value!r}")
    elif kind == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            found.append(f"{path}: expected a number, got {value!r}")
    elif kind == "boolean":
        if not isinstance(value, bool):
            found.append(f"{path}: expected a boolean, got {value!r}")
    else:
        found.append(f"{path}: schema without a type ({spec})")
