"""Forming the group in the open: a late node joins and trains; a node that never starts is named at the deadline.

Real launchers (`python -m crosstrain.launch`) with Vertex AI's variables, on this machine, running the plain
`env://` example (which knows nothing of crosstrain) as 2 processes per node with gloo.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from crosstrain.runtime.join import DEFAULT_JOIN_TIMEOUT, join_timeout
from tests.conftest import ROOT
from tests.runtime.test_multiprocess import base_environment, free_port

PLAIN = ROOT / "examples" / "frameworks" / "plain" / "train.py"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", DEFAULT_JOIN_TIMEOUT),
        ("90", timedelta(seconds=90)),
        ("20m", timedelta(minutes=20)),
        ("1h", timedelta(hours=1)),
    ],
)
def test_the_deadline_is_a_setting(value: str, expected: timedelta) -> None:
    assert join_timeout({"CROSSTRAIN_JOIN_TIMEOUT": value}) == expected
    assert timedelta(minutes=15) <= DEFAULT_JOIN_TIMEOUT  # Vertex replicas reported up to ~11 minutes apart


@pytest.mark.parametrize("value", ["soon", "-5", "0", "10 days"])
def test_a_bad_deadline_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match=r"CROSSTRAIN_JOIN_TIMEOUT is .*: use a positive number of seconds"):
        join_timeout({"CROSSTRAIN_JOIN_TIMEOUT": value})


def vertex_node(node: int, nodes: int, port: int, tmp_path: Path, **extra: str) -> subprocess.Popen[bytes]:
    """One Vertex replica: CLUSTER_SPEC, node-level RANK/WORLD_SIZE, and the launcher in front of the command."""
    cluster = {"workerpool0": ["127.0.0.1:2222"], "workerpool1": [f"127.0.0.1:{2223 + i}" for i in range(nodes - 1)]}
    task = {"type": "workerpool0", "index": 0} if node == 0 else {"type": "workerpool1", "index": node - 1}
    env = {
        **base_environment(tmp_path, **extra),
        "CLUSTER_SPEC": json.dumps({"cluster": cluster, "task": task}),
        "CLOUD_ML_JOB_ID": "1",
        "RANK": str(node),
        "WORLD_SIZE": str(nodes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }
    argv = [sys.executable, "-m", "crosstrain.launch", "--nproc-per-node", "2", "--", sys.executable, str(PLAIN)]
    log = (tmp_path / f"node{node}.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT)


def output(tmp_path: Path, node: int) -> str:
    return (tmp_path / f"node{node}.log").read_text(errors="replace")


def finished(process: subprocess.Popen[bytes], timeout: float, tmp_path: Path) -> int:
    """The process's exit code; a process still running at `timeout` fails the test with what every node said."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        said = "\n".join(
            f"--- node{n}.log\n{output(tmp_path, n)}" for n in (0, 1) if (tmp_path / f"node{n}.log").exists()
        )
        pytest.fail(f"a node still ran after {timeout:.0f} s:\n{said}")


def stop(*processes: subprocess.Popen[bytes]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_node_that_starts_a_minute_late_joins_and_trains(tmp_path: Path) -> None:
    """Replicas start minutes apart on Vertex AI: the primary says whom it waits for, then everyone trains."""
    port = free_port()
    primary = vertex_node(0, 2, port, tmp_path, CROSSTRAIN_JOIN_TIMEOUT="5m")
    late = None
    try:
        time.sleep(60)
        assert primary.poll() is None, output(tmp_path, 0)
        late = vertex_node(1, 2, port, tmp_path)
        assert finished(primary, 240, tmp_path) == 0, output(tmp_path, 0)
        assert finished(late, 60, tmp_path) == 0, output(tmp_path, 1)
    finally:
        stop(primary, *([late] if late else []))
    said = output(tmp_path, 0)
    waiting = re.findall(r"crosstrain\.launch: waiting for node 1 of 2 to join \(until \d\d:\d\d:\d\d UTC", said)
    # every 5 seconds for a minute, less the seconds importing torch takes the primary on a busy machine
    assert len(waiting) >= 6, said
    assert "all 2 nodes joined" in said
    # A node's two ranks write to one log: a line can end where the other rank's begins, so the digest is read as
    # the hex it is, not as the rest of the word.
    digests = re.findall(r"rank (\d)/4 local \d params ([0-9a-f]{16})", said + output(tmp_path, 1))
    assert sorted(rank for rank, _ in digests) == ["0", "1", "2", "3"], said
    assert len({digest for _, digest in digests}) == 1


def test_a_node_that_never_starts_is_named_and_every_other_node_exits(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    present = [vertex_node(n, 3, port, tmp_path, CROSSTRAIN_JOIN_TIMEOUT="10") for n in (0, 1)]
    try:
        codes = [finished(p, 150, tmp_path) for p in present]
    finally:
        stop(*present)
    assert time.monotonic() - started < 120  # the 10 s deadline, not the default 45 minutes, on a busy machine
    assert codes == [3, 3], [output(tmp_path, n) for n in (0, 1)]
    for node in (0, 1):
        said = output(tmp_path, node)
        assert re.search(rf"error: node {node}: node 2 of 3 did not join by \d\d:\d\d:\d\d UTC", said), said
        assert "params" not in said  # no rank started
    assert re.search(r"waiting for nodes? (1, )?2 of 3 to join", output(tmp_path, 0))  # node 1 may be slow to start


def test_a_node_whose_primary_never_starts_names_it(tmp_path: Path) -> None:
    started = time.monotonic()
    alone = vertex_node(1, 2, free_port(), tmp_path, CROSSTRAIN_JOIN_TIMEOUT="6")
    try:
        assert finished(alone, 150, tmp_path) == 3
    finally:
        stop(alone)
    assert time.monotonic() - started < 120  # the 6 s deadline, not the default 45 minutes, on a busy machine
    said = output(tmp_path, 1)
    assert "node 1: waiting for the primary (node 0) at 127.0.0.1" in said
    assert re.search(r"error: node 1: the primary \(node 0 at 127\.0\.0\.1:\d+\) did not come up by", said), said


def test_ranks_the_platform_starts_itself_check_in_through_the_runtime(tmp_path: Path) -> None:
    """Azure ML per process (no launcher in front): `runtime.init()` names the rank that never started."""
    port = free_port()
    script = "from crosstrain import runtime; runtime.init()"
    ranks = []
    for rank in (0, 1):
        env = {
            **base_environment(tmp_path, CROSSTRAIN_JOIN_TIMEOUT="8"),
            "AZUREML_RUN_ID": "r",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": "3",
            "NODE_RANK": str(rank),
            "RANK": str(rank),
            "LOCAL_RANK": "0",
        }
        log = (tmp_path / f"node{rank}.log").open("wb")
        ranks.append(subprocess.Popen([sys.executable, "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT))
    try:
        codes = [p.wait(timeout=90) for p in ranks]
    finally:
        stop(*ranks)
    assert all(code != 0 for code in codes), codes
    for rank in (0, 1):
        assert "JoinTimeout: rank 2 of 3 did not join by" in output(tmp_path, rank), output(tmp_path, rank)
    assert "crosstrain.runtime: waiting for rank 2 of 3 to join" in output(tmp_path, 0)
