"""Fixtures the backends' tests share."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.azureml_cloud import azurite, azurite_command


@pytest.fixture(scope="module")
def azurite_url() -> Iterator[str]:
    """A real Azurite (npm) for one module's uploads; see `azureml_cloud.azurite_command` for where it is found.
    Missing, it fails the test in CI (the noxfile's tests session installs it) and skips it elsewhere."""
    command = azurite_command()
    if command is None:
        message = (
            "azurite-blob not found: npm install azurite (noxfile's tests session does), or set CROSSTRAIN_AZURITE"
        )
        (pytest.fail if os.environ.get("CI") else pytest.skip)(message)
    with azurite(command) as url:
        yield url


@pytest.fixture(scope="session")
def stock(request: pytest.FixtureRequest) -> Path:
    """tests/conftest.py's `stock_python`, made without this run's PYTHONPATH (which would import crosstrain)."""
    saved = os.environ.pop("PYTHONPATH", None)
    try:
        python: Path = request.getfixturevalue("stock_python")
        return python
    finally:
        if saved is not None:
            os.environ["PYTHONPATH"] = saved
