"""Every example renders and validates the same wherever crosstrain runs from: the repo root, the example's
folder, or elsewhere (relative paths in a job resolve against the job file's folder, never the current one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstrain import api
from crosstrain.loader import load_job
from tests.conftest import EXAMPLES, ROOT


def _outcomes(example: Path) -> dict[str, str]:
    job = load_job(example)
    out: dict[str, str] = {}
    for target in ("local", *job.targets):
        try:
            out[target] = api.render(example, target).to_json()
        except Exception as exc:  # a refusal must be the same refusal from everywhere
            out[target] = f"{type(exc).__name__}: {exc}"
    out["validate"] = repr(api.validate(example))
    return out


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_renders_and_validates_the_same_from_anywhere(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    from_root = _outcomes(example.relative_to(ROOT))
    monkeypatch.chdir(example.parent)
    assert _outcomes(Path(example.name)) == from_root
    monkeypatch.chdir(tmp_path)
    assert _outcomes(example) == from_root
    assert "validate" in from_root
