"""The frameworks people use, unchanged, under every local emulation: 2 nodes x 2 processes on the CPU (gloo).

{plain `env://` script, Lightning Fabric, Hugging Face Accelerate, DeepSpeed, a `torchrun` command line} x
{torchrun, vertex, aiplatform, azureml, azureml-mpi, databricks}, through the CLI as a user runs them
(examples/frameworks/). Each cell trains and every rank prints the same digest of its final parameters, or is
refused by the emulated target's render with the platform's reason. Under Azure ML's MPI distribution, whose
ranks get only OMPI_* variables, the shipped code runs under crosstrain's launcher, which gives each rank torch's
env:// variables.

CI runs a subset (every framework and every emulation at least once); `-m frameworks_full` runs all 30 cells.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from crosstrain.backends.local import EMULATIONS, inherited_environment
from tests.backends.test_local import _needs_java
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "frameworks"
FRAMEWORKS = ("plain", "fabric", "accelerate", "deepspeed", "torchrun")
# `[node1 rank3] rank 3/4 ... params <digest>`; Databricks' ranks print through the driver, `[driver rank3] ...`.
DIGEST = re.compile(r"^\[(?:node(\d) rank\d+|driver rank\d+)\] rank (\d+)/(\d+) .*?params (\w+)$", re.MULTILINE)


@dataclass(frozen=True)
class Refused:
    """The emulated target's render refuses the job (exit 2) with this reason."""

    reason: str


EXPECTED: dict[tuple[str, str], Refused] = {
    ("torchrun", "azureml"): Refused("which would start its own in each of them: 4 separate groups"),
    ("torchrun", "azureml-mpi"): Refused("which would start its own in each of them: 4 separate groups"),
    ("torchrun", "databricks"): Refused("TorchDistributor runs a Python file or module itself"),
    ("deepspeed", "azureml-mpi"): Refused("starts a PyTorch job's ranks as mpi, and this job's launch.framework is"),
}
# Every framework once, every emulation once, and the refusals: what CI runs.
CI_CELLS = {
    ("plain", "azureml"),
    ("plain", "azureml-mpi"),
    ("fabric", "vertex"),
    ("accelerate", "aiplatform"),
    ("accelerate", "databricks"),
    ("deepspeed", "databricks"),  # DeepspeedTorchDistributor on a local Spark
    ("deepspeed", "azureml-mpi"),
    ("torchrun", "torchrun"),
    ("torchrun", "azureml-mpi"),
}


def cells() -> list[pytest.param]:  # type: ignore[valid-type]
    return [
        pytest.param(
            framework,
            emulate,
            id=f"{framework}-{emulate}",
            marks=() if (framework, emulate) in CI_CELLS else pytest.mark.frameworks_full,
        )
        for framework in FRAMEWORKS
        for emulate in EMULATIONS
    ]


#: PyTorch's exit race, in a rank that has done all its work: gloo's worker thread frees the last collective's
#: work (its thread-local snapshot holds a Python object) after the main thread has begun interpreter
#: finalization, so taking the GIL ends the thread with `pthread_exit` inside a noexcept destructor, and the rank
#: aborts (SIGABRT). A core shows `ProcessGroupGloo::runLoop` -> `~AsyncBarrierWork` -> `SafePyObject` decref ->
#: `take_gil` -> `PyThread_exit_thread`. These scripts are the frameworks' own, unchanged, so the race is theirs
#: and torch's; crosstrain's runtime closes it for its users (`runtime.dist` destroys the group before
#: finalization). On a loaded 2-core machine it strikes about one run in thirty.
EXIT_RACE = "terminate called without an active exception"


def run(job: Path, emulate: str, *settings: str) -> subprocess.CompletedProcess[str]:
    """The CLI's run, once more if a rank that had printed its digest hit PyTorch's exit race (`EXIT_RACE`)."""
    env = {**inherited_environment(os.environ), "PYTHONPATH": str(ROOT / "src")}
    argv = [sys.executable, "-m", "crosstrain.cli", "run", str(job), "--local", "--emulate", emulate, *settings]
    # A local SparkSession starts slowly on a loaded machine.
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    if done.returncode != 0 and EXIT_RACE in done.stderr and len(set(DIGEST.findall(done.stderr))) == 4:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    return done


@pytest.mark.parametrize(("framework", "emulate"), cells())
def test_the_framework_trains_unchanged_or_the_platform_says_why(framework: str, emulate: str) -> None:
    _needs_java(emulate)
    expected = EXPECTED.get((framework, emulate))
    job = EXAMPLES / framework / "job.yaml"
    done = run(job, emulate)
    said = done.stderr
    if isinstance(expected, Refused):
        assert done.returncode == 2, said[-3000:]
        assert "the local target cannot run this job" in said
        assert expected.reason in said, said[-3000:]
        assert "params" not in said  # refused before anything started
        return
    assert done.returncode == 0, said[-3000:]
    finals = DIGEST.findall(said)  # each rank's line once, tagged with its rank (the Databricks driver's too)
    assert sorted(int(rank) for _, rank, _, _ in finals) == [0, 1, 2, 3], said[-3000:]  # each rank once: one group
    assert {world for _, _, world, _ in finals} == {"4"}
    if emulate != "databricks":  # there each Spark task is a one-process node
        assert {(int(node), int(rank) // 2) for node, rank, _, _ in finals} == {(0, 0), (1, 1)}  # 0-1 on node 0
    assert len({digest for *_, digest in finals}) == 1, finals  # every rank ends with the same parameters
    assert "SUCCEEDED" in said
