"""A platform's words reach the terminal as text: a workspace whose state message, run error, trace, logs and run
page carry escape sequences (a clipboard write, clear screen, a window title, a hidden link, a carriage return)
is followed with `status`, `wait`, `logs` and `list`, each in its own process. No escape reaches stdout or
stderr raw; each is shown as its escape (`\\x1b`), and `--json` carries the text as it came, escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crosstrain.loader import job_from_dict
from crosstrain.testing.conformance import BASE_JOB
from tests.backends.databricks_workspace import DatabricksPlatform
from tests.conftest import ROOT
from tests.test_safe import HOSTILE, RAW


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])},
        timeout=120,
        cwd=ROOT,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DATABRICKS_") and not k.endswith("_proxy")}
    return {**clean, "HOME": str(tmp_path), "DATABRICKS_TOKEN": "loopback"}


def test_status_wait_logs_and_list_show_remote_text_without_its_escapes(env: dict[str, str]) -> None:
    platform = DatabricksPlatform()
    with platform:
        workspace = platform.workspace
        workspace.url = f"{platform.url}/{HOSTILE}"  # the run page URL it answers with
        workspace.state_message = f"Workload failed {HOSTILE}"
        workspace.output = {"logs": f"step 1 {HOSTILE}", "error": f"Error {HOSTILE}", "error_trace": f"at {HOSTILE}"}
        workspace.states = [("TERMINATED", "FAILED")]
        backend = platform.backend()
        made = backend.send(backend.render(job_from_dict(BASE_JOB), platform.settings)).dumps()
        env = {**env, "DATABRICKS_HOST": platform.url}
        runs = {verb: cli(verb, made, env=env) for verb in ("status", "wait", "logs")}
        runs["list"] = cli("list", "-t", "databricks", env=env)
        raw_json = cli("status", made, "--json", env=env).stdout
    assert runs["status"].returncode == 0, runs["status"].stderr
    assert runs["logs"].returncode == 0, runs["logs"].stderr
    assert runs["wait"].returncode == 4
    for verb, done in runs.items():
        shown = done.stdout + done.stderr
        assert not [c for c in RAW if c in shown], (verb, shown)
        assert "\\x1b]52;c;" in shown, (verb, shown)  # shown, as text
        assert "Traceback" not in shown
    assert "\\x1b]0;pwned\\x07" in runs["status"].stdout
    assert "\\rfake line" in runs["status"].stdout
    assert "\\x1b]8;;https://evil.example/" in runs["logs"].stdout
    assert HOSTILE in json.loads(raw_json)["message"]  # the platform's words as they came, escaped by JSON
    assert not [c for c in RAW if c in raw_json]  # C1 controls and bidi overrides too, which JSON leaves raw
