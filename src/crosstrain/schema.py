"""The JSON Schema of job files, with every known target's settings under `targets`."""

from __future__ import annotations

from typing import Any

from crosstrain.errors import CrosstrainError
from crosstrain.registry import entries, get_backend_class
from crosstrain.spec import TrainingJob

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def job_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) that editors use to complete job files and CI uses to check them."""
    schema = TrainingJob.model_json_schema(mode="validation")
    defs = schema.setdefault("$defs", {})
    targets: dict[str, Any] = {}
    for name in sorted(entries()):
        try:
            model = get_backend_class(name).settings_model
        except (CrosstrainError, ImportError, AttributeError):
            continue  # a plugin that cannot load is left out of the schema, not fatal
        target_schema = model.model_json_schema(mode="validation")
        defs.update(target_schema.pop("$defs", {}))
        targets[name] = target_schema
    schema["properties"]["targets"] = {
        "type": "object",
        "description": schema["properties"]["targets"].get("description", ""),
        "properties": targets,
        "additionalProperties": {"type": "object"},
    }
    return {"$schema": SCHEMA_DIALECT, "title": "crosstrain job", **schema}
