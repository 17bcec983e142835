"""The Azure ML create body's schema (`schema.json` beside this), from azure-ai-ml's REST models (`JobBase` whose
`properties` is a `CommandJob`), with their discriminators; a field typed without `Optional` is required. Written by
`python -m crosstrain.schemas.generate`."""

from __future__ import annotations

import enum
import sys
import types as pytypes
import typing
from typing import Any

from crosstrain.schemas.generate import Node, sdk_version, unreachable


def generate() -> Node:
    import datetime

    from azure.ai.ml._restclient.arm_ml_service import models
    from azure.ai.ml._restclient.arm_ml_service._utils import model_base

    found: dict[str, Node] = {}

    def type_node(hint: Any) -> Node:
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, pytypes.UnionType):
            options = [a for a in args if a is not type(None)]
            enums = [a for a in options if isinstance(a, type) and issubclass(a, enum.Enum)]
            if enums:  # `Union[str, SomeEnum]`: Azure's extensible enums, by their known values
                return {"type": "string", "enum": [member.value for member in enums[0]]}
            if len(options) == 1:
                return type_node(options[0])
            raise ValueError(f"azureml: a union crosstrain cannot read: {hint}")
        if origin is typing.Literal:
            return {"type": "string", "enum": [a.value if isinstance(a, enum.Enum) else a for a in args]}
        if origin is list:
            return {"type": "array", "items": type_node(args[0])}
        if origin is dict:
            return {"type": "object", "values": type_node(args[1])}
        if hint is Any:
            return {"type": "any"}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"type": "string", "enum": [member.value for member in hint]}
        if isinstance(hint, type) and issubclass(hint, model_base.Model):
            return {"$ref": model_ref(hint)}
        simple: dict[Any, Node] = {
            str: {"type": "string"},
            int: {"type": "integer"},
            float: {"type": "number"},
            bool: {"type": "boolean"},
            datetime.datetime: {"type": "string", "format": "timestamp"},
            datetime.timedelta: {"type": "string", "format": "iso-duration"},
            bytes: {"type": "string", "format": "bytes"},
        }
        if hint in simple:
            return dict(simple[hint])
        raise ValueError(f"azureml: a type crosstrain cannot read: {hint}")

    def model_ref(cls: Any) -> str:
        name: str = cls.__name__
        if name in found:
            return name
        found[name] = {}
        cls()  # azure-ai-ml lists a model's REST fields on its first instance
        hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]), {"_models": models})
        node: Node = {"type": "object", "properties": {}}
        read_only, required = [], []
        for attr, rest in cls._attr_to_rest_field.items():
            node["properties"][rest._rest_name] = type_node(hints[attr])
            if rest._visibility == ["read"]:
                read_only.append(rest._rest_name)
            elif type(None) not in typing.get_args(hints[attr]):
                required.append(rest._rest_name)
        if read_only:
            node["read_only"] = sorted(read_only)
        if required:
            node["required"] = sorted(required)
        mapping = {k: v for k, v in getattr(cls, "__mapping__", {}).items() if v is not cls}
        if mapping and "__mapping__" in vars(cls):  # a polymorphic base: its subtypes by discriminator value
            prop = next(r._rest_name for r in cls._attr_to_rest_field.values() if r._is_discriminator)
            node["discriminator"] = {
                "property": prop,
                "variants": {k: model_ref(v) for k, v in sorted(mapping.items())},
            }
        found[name] = node
        return name

    root = model_ref(models.JobBase)
    # crosstrain creates command jobs: `properties` is a CommandJob.
    found[root]["properties"]["properties"] = {"$ref": model_ref(models.CommandJob)}
    found = {k: v for k, v in found.items() if k not in unreachable(found, root)}
    source = f"{sdk_version('azure-ai-ml')}: azure.ai.ml._restclient.arm_ml_service.models JobBase, CommandJob"
    return {"source": source, "root": root, "types": dict(sorted(found.items())), "case_insensitive_enums": True}
