"""The bootstrap's `--install` with several processes on one node: Azure ML (per process, MPI) starts the
bootstrap in every process of a node, so the job's requirements must be installed once, not by eight
concurrent pips writing into one environment."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from crosstrain import packaging

PROCESSES = 4
#: What each process runs once the requirements are there: it needs the package the requirements install.
COMMAND = ["python", "-c", "import tinypkg; print('ran', tinypkg.X)"]


def _wheel(folder: Path) -> Path:
    """A one-module wheel, installed offline in about a second."""
    files = {
        "tinypkg/__init__.py": b"X = 42\n",
        "tinypkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n",
        "tinypkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    path = folder / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in {
            **files,
            "tinypkg-1.0.dist-info/RECORD": f"{record}tinypkg-1.0.dist-info/RECORD,,\n".encode(),
        }.items():
            wheel.writestr(name, data)
    return path


def _node(tmp_path: Path, requirements: list[str]) -> tuple[Path, dict[str, str]]:
    """A bundle unpacked as Azure ML unpacks it, and the environment its processes share: one temporary folder
    (the node's), pip pointed at a folder of its own, offline, logging every run."""
    code = tmp_path / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text("")
    stage = packaging.bundle(code, requirements).stage(tmp_path / "node").parent
    site, temp = tmp_path / "site", tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "PYTHONPATH"}
    env |= {
        "TMPDIR": str(temp),
        "PYTHONPATH": str(site),
        "PIP_NO_INDEX": "1",
        "PIP_TARGET": str(site),
        "PIP_LOG": str(tmp_path / "pip.log"),
    }
    return stage, env


def _run_node(stage: Path, env: dict[str, str]) -> list[subprocess.CompletedProcess[str]]:
    """`PROCESSES` bootstraps with `--install` started at once, as the platform starts a node's ranks."""
    argv = [sys.executable, "-m", packaging.PACKAGE, "--install", "--", *COMMAND]
    started = [
        subprocess.Popen(argv, cwd=stage, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    done = []
    for process in started:
        out, err = process.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(argv, process.returncode, out, err))
    return done


def _pip_runs(tmp_path: Path) -> int:
    log = tmp_path / "pip.log"
    return log.read_text().count(" Using pip ") if log.exists() else 0


def test_the_requirements_are_installed_once_per_node_and_every_process_runs_with_them(tmp_path: Path) -> None:
    stage, env = _node(tmp_path, [str(_wheel(tmp_path))])
    done = _run_node(stage, env)
    assert [(d.returncode, d.stdout) for d in done] == [(0, "ran 42\n")] * PROCESSES, [d.stderr for d in done]
    assert _pip_runs(tmp_path) == 1
    said = [d.stderr for d in done]
    assert sum("crosstrain: installing " in s for s in said) == 1
    assert sum("requirements are installed on this node" in s for s in said) == PROCESSES - 1


def test_a_failed_install_fails_every_process_of_the_node_with_its_error(tmp_path: Path) -> None:
    stage, env = _node(tmp_path, ["crosstrain-test-absent==1"])
    done = _run_node(stage, env)
    assert _pip_runs(tmp_path) == 1
    codes = {d.returncode for d in done}
    assert len(codes) == 1
    assert codes != {0}
    for process in done:
        assert "ran" not in process.stdout  # never without the requirements
        assert "No matching distribution found for crosstrain-test-absent==1" in process.stderr
    assert sum("failed in another process on this node" in d.stderr for d in done) == PROCESSES - 1


def test_a_failed_install_is_tried_again_by_the_next_run_on_the_node(tmp_path: Path) -> None:
    """The record of an install is per bundle as unpacked: a run that failed to install (here the wheel was not
    there yet) leaves nothing that fails the next run of the same job on that node."""
    wheel = tmp_path / "wheels" / "tinypkg-1.0-py3-none-any.whl"
    stage, env = _node(tmp_path / "first", [str(wheel)])
    assert {d.returncode for d in _run_node(stage, env)} != {0}
    wheel.parent.mkdir()
    assert _wheel(wheel.parent) == wheel
    stage, again = _node(tmp_path / "again", [str(wheel)])
    again["TMPDIR"] = env["TMPDIR"]
    assert [d.stdout for d in _run_node(stage, again)] == ["ran 42\n"] * PROCESSES
