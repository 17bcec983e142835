"""The AI Platform Training create body's schema (`schema.json` beside this), from the ml v1 discovery document
bundled with google-api-python-client (`GoogleCloudMlV1__Job`) and its "Required." descriptions. Written by
`python -m crosstrain.schemas.generate`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crosstrain.schemas.generate import Node, sdk_version

_DISCOVERY_FORMATS = {
    "int64": "int64",
    "uint64": "int64",
    "google-duration": "duration",
    "google-datetime": "timestamp",
}


def generate() -> Node:
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
    source = f"{sdk_version('google-api-python-client')}: discovery_cache/documents/ml.v1.json, GoogleCloudMlV1__Job"
    return {"source": source, "root": root, "types": dict(sorted(found.items()))}
