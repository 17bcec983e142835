"""Real processes under each platform's emulated environment: 2 nodes x 2 processes on this machine, gloo.

Few tests on purpose (each starts many torch processes): one runs every platform at once, with Vertex's second
replica starting 20 seconds late; one crashes a rank; one starts a process in a broken environment.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import ROOT

WORKER = [sys.executable, str(ROOT / "tests" / "runtime" / "worker.py")]
LATE_START_S = 20
_DISTRIBUTED = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_",
    "NODE_RANK",
    "GROUP_",
    "MASTER_",
    "OMPI_",
    "PMI_",
    "MPI_LOCAL",
    "MV2_",
    "AZ",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "CLOUD_ML",
    "TORCHELASTIC",
    "CROSSTRAIN_PLATFORM",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def launcher(nproc: int) -> list[str]:
    return [sys.executable, "-m", "crosstrain.launch", "--nproc-per-node", str(nproc), "--", *WORKER]


@dataclass
class Node:
    """One process the platform would start: a node's launcher, or a rank."""

    argv: list[str]
    env: dict[str, str]
    delay_s: float = 0.0
    process: subprocess.Popen[bytes] | None = None


def vertex_nodes(port: int, *, late: bool) -> list[Node]:
    pools = {"workerpool0": ["127.0.0.1:2222"], "workerpool1": ["127.0.0.1:2223"]}
    tasks = [{"type": "workerpool0", "index": 0}, {"type": "workerpool1", "index": 0}]
    return [
        Node(
            launcher(2),
            # multi-replica Vertex jobs also set node-level RANK/WORLD_SIZE and MASTER_*: the launcher must not
            # take RANK for a process rank
            {
                "CLUSTER_SPEC": json.dumps({"cluster": pools, "task": task}),
                "CLOUD_ML_JOB_ID": "1",
                "RANK": str(i),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            },
            LATE_START_S if late and i == 1 else 0.0,
        )
        for i, task in enumerate(tasks)
    ]


def aiplatform_nodes(port: int) -> list[Node]:
    tf_config = {"cluster": {"master": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223"]}, "environment": "cloud"}
    return [
        Node(
            launcher(2),
            {
                "CLOUD_ML_JOB_ID": "j",
                "RANK": str(i),
                "WORLD_SIZE": "2",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "TF_CONFIG": json.dumps({**tf_config, "task": {"type": kind, "index": 0}}),
            },
        )
        for i, kind in enumerate(["master", "worker"])
    ]


def azure_pytorch_ranks(port: int) -> list[Node]:
    """Only the variables Azure ML documents (the seed's list), one process per rank."""
    return [
        Node(
            WORKER,
            {
                "AZUREML_RUN_ID": "r",
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "WORLD_SIZE": "4",
                "NODE_RANK": str(rank // 2),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank % 2),
            },
        )
        for rank in range(4)
    ]


def azure_mpi_ranks(port: int) -> list[Node]:
    return [
        Node(
            WORKER,
            {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % 2),
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "OMPI_COMM_WORLD_NODE_RANK": "0",
                "AZ_BATCH_MASTER_NODE": f"127.0.0.1:{port}",
            },
        )
        for rank in range(4)
    ]


def base_environment(results: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DISTRIBUTED)}
    return {
        **env,
        "PYTHONPATH": str(ROOT / "src"),
        "OMP_NUM_THREADS": "1",
        "RESULT_DIR": str(results),
        "INIT_TIMEOUT": "240",
        **extra,
    }


def run_jobs(jobs: dict[str, list[Node]], tmp_path: Path, timeout_s: float, **extra: str) -> dict[str, Path]:
    """Start every node of every job (late ones late) in its own session; wait for all; return result dirs."""
    dirs = {}
    pending = []
    for name, nodes in jobs.items():
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
        for index, node in enumerate(nodes):
            node.env = {**base_environment(dirs[name], **extra), **node.env}
            pending.append((node.delay_s, name, index, node))
    started = time.monotonic()
    try:
        for delay, name, index, node in sorted(pending, key=lambda item: item[0]):
            time.sleep(max(0.0, started + delay - time.monotonic()))
            log = (dirs[name] / f"node-{index}.log").open("wb")
            node.process = subprocess.Popen(
                node.argv, env=node.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
            )
        for _, _, _, node in pending:
            assert node.process is not None
            node.process.wait(timeout=max(1.0, started + timeout_s - time.monotonic()))
    finally:
        for _, _, _, node in pending:
            if node.process and node.process.poll() is None:
                os.killpg(node.process.pid, 9)
    return dirs


def logs(directory: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(directory.glob("*.log")))


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def assert_no_strays(directory: Path) -> None:
    """Every worker wrote pid-<pid> when it started; none may outlive the job (give the kernel a moment)."""
    pids = [int(p.name.split("-")[1]) for p in directory.glob("pid-*")]
    deadline = time.monotonic() + 60  # generous: a loaded machine reaps late; a stray never goes
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if alive(pid)], logs(directory)


def results(directory: Path) -> Iterator[dict[str, Any]]:
    for path in sorted(directory.glob("rank-*.json")):
        yield json.loads(path.read_text())


def test_every_platform_trains_2_nodes_x_2_processes_and_a_late_replica_joins(tmp_path: Path) -> None:
    jobs = {
        "vertex": vertex_nodes(free_port(), late=True),
        "aiplatform": aiplatform_nodes(free_port()),
        "azureml-pytorch": azure_pytorch_ranks(free_port()),
        "azureml-mpi": azure_mpi_ranks(free_port()),
    }
    inner_platform = {"vertex": "torchelastic", "aiplatform": "torchelastic"}  # the launcher's children
    dirs = run_jobs(jobs, tmp_path, timeout_s=420)
    for name, nodes in jobs.items():
        assert [n.process.returncode for n in nodes if n.process] == [0] * len(nodes), logs(dirs[name])
        ranks = list(results(dirs[name]))
        assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3], logs(dirs[name])
        for r in ranks:
            assert r["platform"] == inner_platform.get(name, name)
            assert r["world_size"] == 4
            assert r["sum"] == 0 + 1 + 2 + 3  # all_reduce of the ranks
            assert r["params_identical"]
            assert r["params_changed"]
            assert (r["node_rank"], r["local_rank"]) == (r["rank"] // 2, r["rank"] % 2)
            assert r["primary"] == (r["rank"] == 0)
        assert_no_strays(dirs[name])
    late_log = (dirs["vertex"] / "node-1.log").read_text()
    assert "vertex: node 1/2" in late_log  # the late replica went through the launcher and still joined


def test_a_crashing_rank_brings_the_job_down(tmp_path: Path) -> None:
    jobs = {"vertex": vertex_nodes(free_port(), late=False)}
    started = time.monotonic()
    dirs = run_jobs(jobs, tmp_path, timeout_s=300, CRASH_RANK="3", INIT_TIMEOUT="120")
    codes = [n.process.returncode for n in jobs["vertex"] if n.process]
    assert all(code != 0 for code in codes), (codes, logs(dirs["vertex"]))
    assert time.monotonic() - started < 240  # brought down, not left to time out
    assert "rank 3: crashing on purpose" in (dirs["vertex"] / "node-1.log").read_text()
    assert not list(results(dirs["vertex"]))
    assert len(list(dirs["vertex"].glob("pid-*"))) == 4
    assert_no_strays(dirs["vertex"])


def test_a_bad_environment_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    env = base_environment(tmp_path, WORLD_SIZE="4", RANK="1")  # half an env:// setup: no MASTER_ADDR
    started = time.monotonic()
    done = subprocess.run(WORKER, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0
    assert "ClusterEnvError: single: MASTER_ADDR: is not set, but WORLD_SIZE is 4" in done.stderr
    assert time.monotonic() - started < 60
