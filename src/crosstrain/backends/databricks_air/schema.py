"""The AI Runtime create body's schema (`schema.json` beside this): the same `runs/submit` body as the
`databricks` target's, from databricks-sdk's `JobsAPI.submit` and its dataclasses
(`crosstrain.backends._databricks.submit_schema`). Written by `python -m crosstrain.schemas.generate`."""

from __future__ import annotations

from crosstrain.backends._databricks import submit_schema
from crosstrain.schemas.generate import Node


def generate() -> Node:
    return submit_schema()
