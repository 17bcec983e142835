"""Write each platform's create-body schema (`<platform>.json` here) from the platform's own SDK definitions.

`python -m crosstrain.schemas.generate` rewrites them; `--check` fails when a committed copy differs from what the
installed (pinned) SDKs give. `targets.<target>.patch` is validated against these at render, where no cloud SDK may
be imported, so the schemas are derived once, here, and shipped as package data:

* vertex: the `CustomJob` protobuf descriptors of google-cloud-aiplatform (`aiplatform_v1`), in the API's JSON
  encoding (json names, int64 as strings, Duration and Timestamp as strings); "Output only." fields from the
  messages' own documentation are read-only, "Required." ones required;
* aiplatform: the ml v1 discovery document bundled with google-api-python-client (`GoogleCloudMlV1__Job`), its
  "Required." descriptions;
* azureml: azure-ai-ml's REST models (`JobBase` whose `properties` is a `CommandJob`), with their discriminators;
  a field typed without `Optional` is required;
* databricks: the parameters of databricks-sdk's `JobsAPI.submit` and the dataclasses they take; a dataclass field
  without a default is required.

A patch may not remove a required field, nor add a list element without one (`crosstrain.patch`).

The format (`crosstrain.patch` reads it): `{"root": NAME, "types": {NAME: NODE}}`, a NODE being `{"$ref": NAME}`,
`{"type": "object", "properties": {...}, "values": NODE, "read_only": [...], "required": [...], "discriminator":
{"property": P, "variants": {VALUE: NAME}}}`, `{"type": "array", "items": NODE}`, `{"type": "string", "enum": [...],
"format": F}` (F: int64, duration, iso-duration, timestamp, bytes), `{"type": "integer"|"number"|"boolean"|"any"}`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
import types as pytypes
import typing
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
Node = dict[str, Any]


def _version(dist: str) -> str:
    return f"{dist} {metadata.version(dist)}"


# -- Vertex AI: protobuf descriptors ---------------------------------------------------------------------------
_WELL_KNOWN: dict[str, Node] = {
    "google.protobuf.Duration": {"type": "string", "format": "duration"},
    "google.protobuf.Timestamp": {"type": "string", "format": "timestamp"},
    "google.protobuf.FieldMask": {"type": "string"},
    "google.protobuf.Struct": {"type": "object", "values": {"type": "any"}},
    "google.protobuf.Value": {"type": "any"},
    "google.protobuf.ListValue": {"type": "array", "items": {"type": "any"}},
    "google.protobuf.Any": {"type": "any"},
    "google.protobuf.Empty": {"type": "object", "properties": {}},
    "google.protobuf.BoolValue": {"type": "boolean"},
    "google.protobuf.StringValue": {"type": "string"},
    "google.protobuf.BytesValue": {"type": "string", "format": "bytes"},
    "google.protobuf.Int32Value": {"type": "integer"},
    "google.protobuf.UInt32Value": {"type": "integer"},
    "google.protobuf.Int64Value": {"type": "string", "format": "int64"},
    "google.protobuf.UInt64Value": {"type": "string", "format": "int64"},
    "google.protobuf.FloatValue": {"type": "number"},
    "google.protobuf.DoubleValue": {"type": "number"},
}
_OUTPUT_ONLY = re.compile(r"^\s+(\w+) \([^)]*\):\n\s+Output only\.", re.MULTILINE)
_REQUIRED = re.compile(r"^\s+(\w+) \([^)]*\):\n\s+Required\.", re.MULTILINE)


def vertex() -> Node:
    from google.cloud.aiplatform_v1 import types as vertex_types

    root_message = vertex_types.CustomJob.pb().DESCRIPTOR
    F: Any = type(root_message.fields[0])  # protobuf's FieldDescriptor, whose TYPE_* name the field types

    scalars: dict[int, Node] = {
        F.TYPE_STRING: {"type": "string"},
        F.TYPE_BYTES: {"type": "string", "format": "bytes"},
        F.TYPE_BOOL: {"type": "boolean"},
        F.TYPE_DOUBLE: {"type": "number"},
        F.TYPE_FLOAT: {"type": "number"},
        **{t: {"type": "integer"} for t in (F.TYPE_INT32, F.TYPE_UINT32, F.TYPE_SINT32, F.TYPE_FIXED32)},
        **{t: {"type": "integer"} for t in (F.TYPE_SFIXED32,)},
        **{
            t: {"type": "string", "format": "int64"}
            for t in (F.TYPE_INT64, F.TYPE_UINT64, F.TYPE_SINT64, F.TYPE_FIXED64, F.TYPE_SFIXED64)
        },
    }
    found: dict[str, Node] = {}

    def documented(full_name: str, marker: re.Pattern[str]) -> set[str]:
        """The fields the message's proto-plus class documents with `marker` ("Output only.", "Required.")."""
        cls: Any = vertex_types
        for part in full_name.removeprefix("google.cloud.aiplatform.v1.").split("."):
            cls = getattr(cls, part, None)
        return set(marker.findall(cls.__doc__ or "")) if cls is not None else set()

    def field_node(field: Any) -> Node:
        if field.type == F.TYPE_MESSAGE:
            message = field.message_type
            if message.GetOptions().map_entry:
                return {"type": "object", "values": field_node(message.fields_by_name["value"])}
            node = _WELL_KNOWN.get(message.full_name) or {"$ref": message_ref(message)}
        elif field.type == F.TYPE_ENUM:
            node = {"type": "string", "enum": [value.name for value in field.enum_type.values]}
        else:
            node = dict(scalars[field.type])
        return {"type": "array", "items": node} if field.is_repeated else node

    def message_ref(message: Any) -> str:
        name: str = message.full_name.removeprefix("google.cloud.aiplatform.v1.")
        if name not in found:
            found[name] = {}  # recursive messages refer to themselves
            read_only = documented(message.full_name, _OUTPUT_ONLY)
            required = documented(message.full_name, _REQUIRED)
            node: Node = {"type": "object", "properties": {}}
            for field in message.fields:
                node["properties"][field.json_name] = field_node(field)
            names = sorted(f.json_name for f in message.fields if f.name in read_only)
            if names:
                node["read_only"] = names
            names = sorted(f.json_name for f in message.fields if f.name in required)
            if names:
                node["required"] = names
            found[name] = node
        return name

    root = message_ref(root_message)
    source = f"{_version('google-cloud-aiplatform')}: google.cloud.aiplatform_v1 CustomJob protobuf descriptors"
    return {"source": source, "root": root, "types": dict(sorted(found.items()))}


# -- AI Platform Training: the ml v1 discovery document ----------------------------------------------------------
_DISCOVERY_FORMATS = {
    "int64": "int64",
    "uint64": "int64",
    "google-duration": "duration",
    "google-datetime": "timestamp",
}


def aiplatform() -> Node:
    import googleapiclient

    path = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "ml.v1.json"
    schemas: dict[str, Any] = json.loads(path.read_text())["schemas"]
    found: dict[str, Node] = {}

    def node_of(spec: dict[str, Any]) -> Node:
        if "$ref" in spec:
            return {"$ref": schema_ref(spec["$ref"])}
        kind = spec.get("type")
        if kind == "object":
            node: Node = {"type": "object"}
            if "properties" in spec or "additionalProperties" not in spec:
                node["properties"] = {k: node_of(v) for k, v in spec.get("properties", {}).items()}
            if "additionalProperties" in spec:
                node["values"] = node_of(spec["additionalProperties"])
            read_only = sorted(k for k, v in spec.get("properties", {}).items() if v.get("readOnly"))
            if read_only:
                node["read_only"] = read_only
            required = sorted(
                k for k, v in spec.get("properties", {}).items() if v.get("description", "").startswith("Required")
            )
            if required:
                node["required"] = required
            return node
        if kind == "array":
            return {"type": "array", "items": node_of(spec["items"])}
        if kind == "string":
            node = {"type": "string"}
            if "enum" in spec:
                node["enum"] = list(spec["enum"])
            if spec.get("format") in _DISCOVERY_FORMATS:
                node["format"] = _DISCOVERY_FORMATS[spec["format"]]
            return node
        if kind in ("integer", "number", "boolean", "any"):
            return {"type": kind}
        raise ValueError(f"ml.v1: a schema crosstrain cannot read: {spec}")

    def schema_ref(name: str) -> str:
        if name not in found:
            found[name] = {}
            found[name] = node_of({"type": "object", **schemas[name]})
        return name

    root = schema_ref("GoogleCloudMlV1__Job")
    source = f"{_version('google-api-python-client')}: discovery_cache/documents/ml.v1.json, GoogleCloudMlV1__Job"
    return {"source": source, "root": root, "types": dict(sorted(found.items()))}


# -- Azure ML: the REST models of azure-ai-ml --------------------------------------------------------------------
def azureml() -> Node:
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
    found = {k: v for k, v in found.items() if k not in _unreachable(found, root)}
    source = f"{_version('azure-ai-ml')}: azure.ai.ml._restclient.arm_ml_service.models JobBase, CommandJob"
    return {"source": source, "root": root, "types": dict(sorted(found.items())), "case_insensitive_enums": True}


def _unreachable(found: dict[str, Node], root: str) -> set[str]:
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in seen:
                seen.add(ref)
                walk(found[ref])
            for key, value in node.items():
                if key == "variants":
                    for name in value.values():
                        walk({"$ref": name})
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({"$ref": root})
    return set(found) - seen


# -- Databricks: the SDK's runs/submit parameters and dataclasses -----------------------------------------------
def databricks() -> Node:
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
    source = f"{_version('databricks-sdk')}: databricks.sdk.service.jobs.JobsAPI.submit and its dataclasses"
    return {"source": source, "root": "jobs.submit", "types": dict(sorted(found.items()))}


GENERATORS: dict[str, Callable[[], Node]] = {
    "vertex": vertex,
    "aiplatform": aiplatform,
    "azureml": azureml,
    "databricks": databricks,
}


def text_of(schema: Node) -> str:
    return json.dumps(schema, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for platform, generate in GENERATORS.items():
        target = HERE / f"{platform}.json"
        text = text_of(generate())
        if check:
            if not target.exists() or target.read_text() != text:
                stale.append(str(target))
        else:
            target.write_text(text)
            print(f"wrote {target}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m crosstrain.schemas.generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
