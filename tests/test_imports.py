"""`import crosstrain` and `crosstrain render` stay light: no cloud SDK and no torch, ever."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from crosstrain.testing.conformance import HEAVY_MODULES
from tests.conftest import ROOT

BLOCKER = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in {heavy!r}):
            raise ImportError("imported " + name)
sys.meta_path.insert(0, Block())
"""


def importtime(code: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "CROSSTRAIN_FAKE_ROOT": "/nonexistent"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}


@pytest.mark.parametrize(
    "code",
    [
        "import crosstrain",
        "import crosstrain; crosstrain.TrainingJob; crosstrain.render",
        "from crosstrain.cli import main; main(['render', 'examples/ddp-quickstart/job.yaml', '-t', 'fake'])",
        "from crosstrain.cli import main; main(['render', 'examples/ddp-quickstart/job.yaml', '--local'])",
        "from crosstrain.cli import main; main(['render', 'examples/ddp-quickstart/job.yaml', '--local', "
        "'--emulate', 'azureml'])",
        "from crosstrain.cli import main; main(['schema'])",
    ],
)
def test_no_heavy_module_is_imported(code: str) -> None:
    modules = importtime(BLOCKER.format(heavy=HEAVY_MODULES) + code)
    assert "crosstrain" in modules
    assert not [m for m in modules if m.startswith(HEAVY_MODULES)]


def test_import_crosstrain_imports_not_even_pydantic() -> None:
    modules = importtime("import crosstrain")
    assert "pydantic" not in modules
    assert "tenacity" not in modules


def test_the_blocker_would_catch_an_sdk_import() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER.format(heavy=HEAVY_MODULES) + "import torch"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "imported torch" in done.stderr


def test_a_render_without_a_config_file_imports_no_toml_library() -> None:
    """The config file is read (with tomllib) only where it exists; tests/conftest.py names one that does not."""
    for code in (
        "import crosstrain",
        "from crosstrain.cli import main; main(['render', 'examples/ddp-quickstart/job.yaml', '-t', 'fake'])",
    ):
        modules = importtime(code)
        assert "crosstrain" in modules
        assert not {"tomllib", "tomlkit"} & modules, code


@pytest.mark.parametrize("target", ["vertex", "aiplatform", "azureml", "databricks", "fake"])
def test_a_cloud_render_imports_nothing_it_does_not_use(target: str) -> None:
    """Reading package metadata or package data, the preflight, a price refresh's HTTP client, a platform's local
    emulation: none is a render's, and each was a few ms of a cold one. Nor is writing an archive, but on
    Databricks, whose request carries it (and whose task module, which the render reads its names from, unpacks
    one)."""
    code = f"from crosstrain.cli import main; main(['render', 'examples/ddp-quickstart/job.yaml', '-t', '{target}'])"
    modules = importtime(code)
    assert "crosstrain.backends.base" in modules
    unused = {"importlib.metadata", "importlib.resources", "urllib.request", "crosstrain.preflight", "pathspec"}
    unused |= {"crosstrain.backends.emulation", f"crosstrain.backends.{target}.emulate"}
    if target != "databricks":
        unused |= {"tarfile", "gzip", "tempfile", "glob"}
    assert not unused & modules, sorted(unused & modules)
