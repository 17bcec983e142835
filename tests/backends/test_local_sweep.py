"""Sweeps on this machine: the trials chosen here, each a local run with its values, run to the end; the best
named. The example sweeps the quickstart's learning rate over 4 trials and finds the best one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import crosstrain
from crosstrain.backends.local import inherited_environment
from crosstrain.errors import Unsupported
from crosstrain.loader import load_job
from crosstrain.registry import create_backend
from tests.conftest import ROOT, drained

EXAMPLE = ROOT / "examples" / "sweep" / "job.yaml"


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own, on this crosstrain (the one these tests import)."""
    env = inherited_environment(os.environ)
    env["PYTHONPATH"] = str(Path(crosstrain.__file__).parent.parent)
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def on_a_terminal(*args: str) -> list[str]:
    """The CLI's lines as a terminal shows them (its stdout a pty), colour left out."""
    import pty
    import re

    env = inherited_environment(os.environ)
    env["PYTHONPATH"] = str(Path(crosstrain.__file__).parent.parent)
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "crosstrain.cli", *args], stdout=secondary, stderr=subprocess.DEVNULL, env=env, cwd=ROOT
    )
    os.close(secondary)
    seen = drained(primary, process)
    assert process.wait(timeout=60) == 0
    return re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).replace("\r\n", "\n").splitlines()


def test_each_trial_is_a_local_run_with_its_values(tmp_path: Path) -> None:
    request = create_backend("local", environ={}).render(load_job(EXAMPLE), {"runs_dir": str(tmp_path)})
    sweep = request.create.body["sweep"]
    assert [t["params"] for t in sweep["trials"]] == [{"lr": 0.0005}, {"lr": 0.005}, {"lr": 0.05}, {"lr": 0.5}]
    assert (sweep["metric"], sweep["goal"], sweep["parallel_trials"]) == ("loss", "minimize", 2)
    for number, trial in enumerate(sweep["trials"], 1):
        (process,) = trial["run"]["processes"]
        assert process["argv"][-2:] == ["--lr", str(trial["params"]["lr"])]  # ${sweep.lr}, written as the value
        assert process["env"]["CROSSTRAIN_TRIAL_ID"] == str(number)
        assert process["env"]["CROSSTRAIN_SWEEP_lr"] == str(trial["params"]["lr"])
        assert process["env"]["CROSSTRAIN_SWEEP_RESULTS"] == trial["results"]
        assert trial["results"].startswith(str(tmp_path / "sweeps" / request.identity))


def test_local_refuses_what_it_cannot_choose_here() -> None:
    job = load_job(EXAMPLE).model_copy(deep=True)
    bayesian = job.model_copy(update={"sweep": job.sweep.model_copy(update={"algorithm": "bayesian"})})  # type: ignore[union-attr]
    with pytest.raises(Unsupported) as refused:
        create_backend("local", environ={}).render(bayesian)
    (problem,) = refused.value.problems
    assert problem.path == "sweep.algorithm"
    assert "no optimiser" in problem.message


def test_the_example_runs_its_trials_here_and_names_the_best(tmp_path: Path) -> None:
    done = cli("run", str(EXAMPLE), "--local", "--set", f"runs_dir={tmp_path}", "--json", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["state"] == "SUCCEEDED"
    sweep = result["outcome"]["sweep"]
    assert [t["state"] for t in sweep["trials"]] == ["SUCCEEDED"] * 4
    assert all(t["step"] == 4 for t in sweep["trials"])  # each reported its last epoch
    losses = {t["params"]["lr"]: t["value"] for t in sweep["trials"]}
    assert sweep["best"]["params"] == {"lr": 0.05}  # the quickstart's own learning rate wins
    assert sweep["best"]["value"] == min(losses.values())
    assert "best: trial 3 (lr=0.05), loss" in done.stderr
    # `list` shows the sweep as one row (its trials' runs are in it), and `status` of its handle names the best
    listed = cli("list", "-t", "local", "--set", f"runs_dir={tmp_path}", "--json", timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [job["identity"] for job in rows] == [result["identity"]]
    assert rows[0]["state"] == "SUCCEEDED"
    assert rows[0]["sweep"]["trials"] == 4
    assert rows[0]["sweep"]["states"] == {"SUCCEEDED": 4}
    assert rows[0]["sweep"]["best"]["params"] == {"lr": 0.05}
    table = on_a_terminal("list", "-t", "local", "--set", f"runs_dir={tmp_path}")  # a person sees the trials
    assert table[1].split()[:4] == [result["identity"], "SUCCEEDED", "(best:", "trial"]
    assert "4 of 4 trials succeeded)" in table[1]
    handle = tmp_path / "sweeps" / result["identity"] / "handle.json"
    shown = cli("status", str(handle), timeout=120)
    assert "best: trial 3 (lr=0.05)" in shown.stdout, shown.stderr
    said = json.loads(cli("status", str(handle), "--json", timeout=120).stdout)
    assert said["outcome"]["sweep"]["best"]["trial"] == 3  # every trial, and the best, with --json
