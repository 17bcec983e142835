"""The Databricks create body's schema (`schema.json` beside this), from the parameters of databricks-sdk's
`JobsAPI.submit` and the dataclasses they take (`crosstrain.backends._databricks.submit_schema`, shared with the AI
Runtime target). Written by `python -m crosstrain.schemas.generate`."""

from __future__ import annotations

from crosstrain.backends._databricks import submit_schema
from crosstrain.schemas.generate import Node


def generate() -> Node:
    return submit_schema()
