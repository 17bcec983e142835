from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`fuzz_long` tests run only when asked for by name (`-m fuzz_long`): CI runs the bounded fuzz suite."""
    if "fuzz_long" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="ten times more fuzzing: run with -m fuzz_long")
    for item in items:
        if "fuzz_long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the fake cloud at a fresh directory for this test."""
    root = tmp_path / "cloud"
    monkeypatch.setenv("CROSSTRAIN_FAKE_ROOT", str(root))
    return root
