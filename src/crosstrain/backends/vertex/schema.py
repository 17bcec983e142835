"""The Vertex AI create body's schema (`schema.json` beside this), from google-cloud-aiplatform's `CustomJob`
protobuf descriptors (`aiplatform_v1`) in the API's JSON encoding (json names, int64 as strings, Duration and
Timestamp as strings); "Output only." fields from the messages' own documentation are read-only, "Required." ones
required. Written by `python -m crosstrain.schemas.generate`."""

from __future__ import annotations

import re
from typing import Any

from crosstrain.schemas.generate import Node, sdk_version

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


def generate() -> Node:
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
    source = f"{sdk_version('google-cloud-aiplatform')}: google.cloud.aiplatform_v1 CustomJob protobuf descriptors"
    return {"source": source, "root": root, "types": dict(sorted(found.items()))}
