from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the fake cloud at a fresh directory for this test."""
    root = tmp_path / "cloud"
    monkeypatch.setenv("CROSSTRAIN_FAKE_ROOT", str(root))
    return root
