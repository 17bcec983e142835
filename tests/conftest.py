from __future__ import annotations

import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))


def printed_by(program: str) -> list[str]:
    """The words a fresh Python prints running `program`: what a process imports at its start shows only there."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()


def drained(primary: int, process: subprocess.Popen[bytes], poll: float = 0.2) -> bytes:
    """What `process` wrote to the pseudo-terminal whose other side is `primary`, until it ended and nothing was
    left to read; `primary` is closed after."""
    seen = b""
    while process.poll() is None or select.select([primary], [], [], poll)[0]:
        if select.select([primary], [], [], poll)[0]:
            try:
                seen += os.read(primary, 65536)
            except OSError:  # its side is closed (Linux answers EIO)
                break
    os.close(primary)
    return seen


# Markers whose tests run only when selected by name (`-m fuzz_long`): CI runs the bounded suites.
SELECTED_ONLY = {
    "fuzz_long": "ten times more fuzzing: run with -m fuzz_long",
    "frameworks_full": "the whole frameworks x emulations matrix: run with -m frameworks_full",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests under a `SELECTED_ONLY` marker are skipped unless the marker expression names it."""
    selected = config.getoption("markexpr", "") or ""
    for marker, reason in SELECTED_ONLY.items():
        if marker in selected:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def config_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's stand-in for ~/.config: crosstrain's folder there (`handle.key`) is the tests' own."""
    return tmp_path_factory.mktemp("config-home")


@pytest.fixture(autouse=True)
def no_user_config(monkeypatch: pytest.MonkeyPatch, config_home: Path) -> Iterator[Path]:
    """No test reads the developer's own config file or profile (`crosstrain.userconfig`): CROSSTRAIN_CONFIG
    names a file that does not exist, which a test that needs one replaces with its own in its tmp_path, and
    XDG_CONFIG_HOME the session's folder; subprocesses inherit both."""
    absent = config_home / "crosstrain" / "config.toml"
    monkeypatch.setenv("CROSSTRAIN_CONFIG", str(absent))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    monkeypatch.delenv("CROSSTRAIN_PROFILE", raising=False)
    yield absent
    assert not absent.exists(), "a test wrote the shared config file: point CROSSTRAIN_CONFIG at its own tmp_path"


@pytest.fixture
def fake_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the fake cloud at a fresh directory for this test."""
    root = tmp_path / "cloud"
    monkeypatch.setenv("CROSSTRAIN_FAKE_ROOT", str(root))
    return root


@pytest.fixture(scope="session")
def stock_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python where torch (and everything else installed here) imports, and crosstrain does not: what a
    stock PyTorch image offers. A job that ships its code must run there (crosstrain travels with the code)."""
    import os
    import subprocess
    import sys
    import sysconfig

    root = tmp_path_factory.mktemp("stock")
    site = Path(sysconfig.get_paths()["purelib"])
    lib = root / "lib"
    lib.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if "crosstrain" in name or name.startswith("__editable__") or name.endswith(".pth"):
            continue
        (lib / entry.name).symlink_to(entry)
    venv = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    venv_site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(venv_site) / "torch-only.pth").write_text(f"{lib}\n")
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([str(python), "-c", "import torch, crosstrain"], capture_output=True, text=True, env=clean)
    assert "No module named 'crosstrain'" in probe.stderr, probe.stderr
    return python
