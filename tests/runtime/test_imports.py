"""`import crosstrain.runtime` and the launcher's detection load the standard library only: no torch, no pydantic,
no tenacity, no cloud SDK (torch and tenacity load when init() runs)."""

from __future__ import annotations

import pytest

from crosstrain.testing.conformance import HEAVY_MODULES
from tests.test_imports import importtime

LIGHT_FORBIDDEN = (*HEAVY_MODULES, "pydantic", "tenacity", "yaml")


@pytest.mark.parametrize(
    "code",
    [
        "import crosstrain.runtime",
        'from crosstrain import runtime; runtime.detect({\'CLUSTER_SPEC\': \'{"cluster": {"workerpool0": ["h:1"]},'
        ' "task": {"type": "workerpool0", "index": 0}}\'})',
        "import crosstrain.launch",
    ],
)
def test_runtime_imports_only_the_standard_library(code: str) -> None:
    modules = importtime(code)
    assert "crosstrain.runtime" in modules
    assert not [m for m in modules if m.startswith(LIGHT_FORBIDDEN)]
