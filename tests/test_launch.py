"""`python -m crosstrain.launch`: what it runs on each kind of platform, and that it becomes that process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crosstrain.backends.base import launcher_command
from crosstrain.launch import child_environment, main, plan, with_node_count
from crosstrain.runtime import ClusterEnvError, detect
from crosstrain.runtime.platforms import Topology, VertexAI
from tests.conftest import ROOT
from tests.runtime.test_env import CASES, vertex
from tests.runtime.test_multiprocess import free_port

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]
CMD = ["python", "-m", "train", "--epochs", "3"]


def test_node_level_platform_starts_torchrun_with_node_facts() -> None:
    env = detect(vertex("workerpool1", 1, MASTER_PORT="3333"))
    assert plan(env, "4", CMD) == [
        *TORCHRUN,
        "--nnodes=3",
        "--node_rank=2",
        "--master_addr=cmle-training-workerpool0-ab-0",
        "--master_port=3333",
        "--nproc_per_node=4",
        "--max_restarts=0",
        "--no_python",
        *CMD,
    ]


def test_one_process_per_machine_on_azure_is_expanded_with_rank_as_node() -> None:
    env = detect(CASES["azure pytorch, one per node (RANK is the node)"][0])
    assert plan(env, "2", CMD)[3:8] == [
        "--nnodes=2",
        "--node_rank=1",
        "--master_addr=m",
        "--master_port=6105",
        "--nproc_per_node=2",
    ]
    assert plan(env, "1", CMD) == CMD  # one per machine, one wanted: it already is the rank


@pytest.mark.parametrize(
    "case",
    [
        "azure pytorch seed, node 1",
        "azure pytorch seed, node 0 says nothing of the node size",
        "azure mpi seed (Open MPI), rank 5 of 8",
        "torchrun, 2 nodes x 4",
        "databricks distributed: one torchrun node per Spark task",
        "plain env://, one process per machine",
    ],
)
def test_processes_that_already_exist_run_the_command_as_is(case: str) -> None:
    assert plan(detect(CASES[case][0]), "8", CMD) == CMD


def test_auto_is_one_per_gpu_or_one_without() -> None:
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert f"--nproc_per_node={max(gpus, 1)}" in plan(detect(vertex()), "auto", CMD)
    if gpus <= 1:  # a bare container with at most one GPU: the command is already the only process
        assert plan(detect({}), "auto", CMD) == CMD


def test_backends_render_a_command_this_launcher_parses(capsys: pytest.CaptureFixture[str]) -> None:
    rendered = launcher_command(CMD, nproc_per_node=2)
    assert rendered[:3] == ["python", "-m", "crosstrain.launch"]
    with pytest.raises(SystemExit) as done:
        main([*rendered[3:5], "--help"])
    assert done.value.code == 0
    assert "--nproc-per-node" in capsys.readouterr().out


def test_the_children_detect_themselves_afresh() -> None:
    env = detect(vertex())
    assert child_environment({"CROSSTRAIN_PLATFORM": "vertex", "A": "1"}, env, TORCHRUN) == {"A": "1", "NODE_RANK": "0"}


def test_a_rank_started_by_mpi_gets_the_env_variables_frameworks_read() -> None:
    """Open MPI names the rank OMPI_COMM_WORLD_RANK; Lightning, Accelerate and `env://` read RANK & co."""
    mpi = CASES["azure mpi seed (Open MPI), rank 5 of 8"][0]
    env = detect(mpi)
    child = child_environment(mpi, env, CMD)
    assert {k: child[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK")} == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": str(env.local_rank),
        "LOCAL_WORLD_SIZE": str(env.nproc_per_node),
        "NODE_RANK": str(env.node_rank),
    }
    assert child["MASTER_ADDR"] == env.master_addr
    assert child["MASTER_PORT"] == str(env.master_port)


@pytest.mark.parametrize(
    "command",
    [
        ["torchrun", "--nproc_per_node=2", "train.py", "--nnodes", "7"],
        ["python", "-m", "torch.distributed.launch", "--nproc-per-node", "2", "--use-env", "train.py"],
        ["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "train"],
    ],
)
def test_a_torchrun_command_line_becomes_the_nodes_launcher_with_the_node_arguments(command: list[str]) -> None:
    """The single-node torchrun line a user has runs unchanged on every node: the launcher adds the node count,
    node rank and rendezvous from the platform (Vertex's node-level RANK is never taken for a process rank), and
    leaves the script's own arguments alone."""
    env = detect(vertex("workerpool1", 1, MASTER_PORT="3333"))
    prefix = 1 if command[0] == "torchrun" else 3
    node_arguments = [
        "--nnodes=3",
        "--node_rank=2",
        "--master_addr=cmle-training-workerpool0-ab-0",
        "--master_port=3333",
    ]
    assert plan(env, "auto", command) == [*command[:prefix], *node_arguments, *command[prefix:]]


def test_a_torchrun_line_keeps_what_it_sets_itself() -> None:
    env = detect(vertex("workerpool1", 1, MASTER_PORT="3333"))
    line = plan(env, "auto", ["torchrun", "--nnodes=3", "--node-rank", "2", "--nproc_per_node=2", "t.py"])
    assert line[1:3] == ["--master_addr=cmle-training-workerpool0-ab-0", "--master_port=3333"]
    assert "--node_rank=2" not in line
    standalone = ["torchrun", "--standalone", "--nproc_per_node=2", "t.py"]
    assert plan(env, "auto", standalone) == standalone


def test_a_torchrun_line_where_the_platform_started_every_rank_is_refused() -> None:
    """Azure ML per process and MPI start every rank: torchrun in each would multiply them (accelerate#3494)."""
    env = detect(CASES["azure pytorch seed, node 1"][0])
    with pytest.raises(ClusterEnvError, match="which would start more processes in each") as refused:
        plan(env, "auto", ["torchrun", "--nproc_per_node=2", "t.py"])
    assert "launch.mode per-node" in str(refused.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [([], "no command"), (["--"], "no command"), (["--nproc-per-node", "0", "--", "x"], "use 'auto' or a positive")],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    assert message in capsys.readouterr().err


def test_a_bad_environment_exits_2_naming_platform_and_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CLUSTER_SPEC", vertex("workerpool2", 0)["CLUSTER_SPEC"])
    assert main(["--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("crosstrain.launch: error: vertex: CLUSTER_SPEC: task.type is 'workerpool2'")
    assert "fix: run the training command" in err


def clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "CLUSTER"))}


def launch(*command: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crosstrain.launch", "--", *command],
        env={**clean_environment(), "PYTHONPATH": str(ROOT / "src"), **env},
        stderr=subprocess.PIPE,
        text=True,
    )


AZURE_PER_PROCESS = CASES["azure pytorch seed, node 1"][0]


def test_exec_passes_the_exit_code_and_signals_on() -> None:
    exited = launch("sh", "-c", "exit 7", **AZURE_PER_PROCESS)
    assert exited.wait(timeout=60) == 7
    assert "running the command as is" in (exited.stderr.read() if exited.stderr else "")

    sleeper = launch("sleep", "60", **AZURE_PER_PROCESS)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until the launcher has become `sleep`
        with open(f"/proc/{sleeper.pid}/cmdline", "rb") as cmdline:
            if cmdline.read().startswith(b"sleep"):
                break
        time.sleep(0.05)
    sleeper.send_signal(signal.SIGTERM)
    assert sleeper.wait(timeout=30) == -signal.SIGTERM

    missing = launch("no-such-command-xyz", **AZURE_PER_PROCESS)
    assert missing.wait(timeout=60) == 127


def test_the_rendered_node_count_settles_azures_ambiguous_node_0() -> None:
    """On node 0, Azure's PyTorch variables look alike with one process per node and one per GPU; the node
    count the backend rendered (`--nnodes`) settles it, so node 0 starts torchrun like every other node."""
    azure = {"AZUREML_RUN_ID": "r", "MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "WORLD_SIZE": "2"}
    node0 = detect({**azure, "RANK": "0", "NODE_RANK": "0", "LOCAL_RANK": "0"})
    assert plan(node0, "4", ["python", "t.py"]) == ["python", "t.py"]  # without the node count: as is
    settled = with_node_count(node0, 2)
    line = plan(settled, "4", ["python", "t.py"])
    assert "--nnodes=2" in line
    assert "--node_rank=0" in line
    assert "--nproc_per_node=4" in line
    with pytest.raises(ClusterEnvError, match="not a multiple of --nnodes 3"):
        with_node_count(node0, 3)


def test_a_command_run_as_is_gets_torchruns_variables_and_a_lone_process_none() -> None:
    mpi = CASES["azure mpi seed (Open MPI), rank 5 of 8"][0]
    child = child_environment(mpi, detect(mpi), CMD)
    assert {k: child[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")} == {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
    }
    assert (child["NODE_RANK"], child["GROUP_RANK"], child["MASTER_ADDR"]) == ("1", "1", "10.0.0.4")
    assert child_environment({"A": "1"}, detect({}), CMD) == {"A": "1"}  # init() picks a free port for it


def test_torchruns_children_see_the_node_rank_vertex_never_sets(tmp_path: Path) -> None:
    """Real torchrun under the launcher on two Vertex nodes: each rank sees torchrun's variables and NODE_RANK,
    and none sees Vertex's node-level RANK/WORLD_SIZE (Lightning-AI/pytorch-lightning#13374)."""
    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "MASTER_ADDR"]
    show = (
        f"import os, sys; print(*[os.environ.get(n) for n in {names!r}], "
        "file=open(sys.argv[1] + os.environ['RANK'], 'w'))"
    )
    command = [sys.executable, "-c", show, str(tmp_path / "r")]
    port = str(free_port())
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "crosstrain.launch", "--nproc-per-node", "2", "--", *command],
            env={**clean_environment(), "PYTHONPATH": str(ROOT / "src"), **environ, "MASTER_PORT": port},
            stderr=subprocess.PIPE,
            text=True,
        )
        for environ in VertexAI.emulate(Topology(2, job_id="j"))
    ]
    errors = [node.communicate(timeout=120)[1] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], errors
    seen = [(tmp_path / f"r{rank}").read_text().split() for rank in range(4)]
    assert seen == [[str(r), "4", str(r % 2), "2", str(r // 2), str(r // 2), "127.0.0.1"] for r in range(4)]
