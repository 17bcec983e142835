"""The Databricks create body's schema (`schema.json` beside this), from the parameters of databricks-sdk's
`JobsAPI.submit` and the dataclasses they take; a dataclass field without a default is required. Written by
`python -m crosstrain.schemas.generate`."""

from __future__ import annotations

import dataclasses
import enum
import types as pytypes
import typing
from typing import Any

from crosstrain.schemas.generate import Node, sdk_version


def generate() -> Node:
    from databricks.sdk.service.jobs import JobsAPI

    found: dict[str, Node] = {}

    def type_node(hint: Any) -> Node:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, pytypes.UnionType):
            options = [a for a in args if a is not type(None)]
            if len(options) == 1:
                return type_node(options[0])
            raise ValueError(f"databricks: a union crosstrain cannot read: {hint}")
        if origin is list:
            return {"type": "array", "items": type_node(args[0])}
        if origin is dict:
            return {"type": "object", "values": type_node(args[1])}
        if hint is Any:
            return {"type": "any"}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"type": "string", "enum": [member.value for member in hint]}
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            return {"$ref": dataclass_ref(hint)}
        simple: dict[Any, Node] = {
            str: {"type": "string"},
            int: {"type": "integer"},
            float: {"type": "number"},
            bool: {"type": "boolean"},
        }
        if hint in simple:
            return dict(simple[hint])
        raise ValueError(f"databricks: a type crosstrain cannot read: {hint}")

    def dataclass_ref(cls: type) -> str:
        name = f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"
        if name not in found:
            found[name] = {}
            hints = typing.get_type_hints(cls)
            fields = {f.name: type_node(hints[f.name]) for f in dataclasses.fields(cls)}
            found[name] = {"type": "object", "properties": fields}
            required = sorted(
                f.name
                for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            if required:
                found[name]["required"] = required
        return name

    hints = typing.get_type_hints(JobsAPI.submit)
    hints.pop("return")
    found["jobs.submit"] = {}
    found["jobs.submit"] = {"type": "object", "properties": {k: type_node(v) for k, v in sorted(hints.items())}}
    source = f"{sdk_version('databricks-sdk')}: databricks.sdk.service.jobs.JobsAPI.submit and its dataclasses"
    return {"source": source, "root": "jobs.submit", "types": dict(sorted(found.items()))}
