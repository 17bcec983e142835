"""Each platform module's two directions are inverses: for any topology, every process the platform starts reads
back (through the real `detect`) its place in the job, and the process that runs the user's command (crosstrain's
launcher and torchrun in between where the platform starts one process per node) sees torchrun's variables.

Property-based: nodes 1..8, processes per node 1..8, each launch mode the platform has, any master host and port.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crosstrain.launch import child_environment, plan, with_node_count
from crosstrain.runtime import ClusterEnv, detect
from crosstrain.runtime.env import PLATFORMS
from crosstrain.runtime.platforms import (
    AIPlatformTraining,
    AzureMLMPI,
    AzureMLPyTorch,
    Databricks,
    DatabricksAIR,
    PlainEnv,
    Platform,
    SingleProcess,
    Topology,
    TorchElastic,
    VertexAI,
)
from crosstrain.runtime.platforms.azureml import AZURE_MASTER_PORT
from crosstrain.runtime.platforms.base import DEFAULT_MASTER_PORT, LOCALHOST

CMD = ["python", "train.py"]
# What torchrun gives each process, and what frameworks read: Lightning (NODE_RANK or GROUP_RANK, LOCAL_RANK),
# Accelerate (RANK, WORLD_SIZE, LOCAL_RANK), torch's env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
TORCHRUN_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)
EMULATED: dict[str, type[Platform]] = {
    "torchelastic": TorchElastic,
    "vertex": VertexAI,
    "aiplatform": AIPlatformTraining,
    "azureml": AzureMLPyTorch,
    "azureml-mpi": AzureMLMPI,
    "databricks": Databricks,
    "databricks-air": DatabricksAIR,
    "env": PlainEnv,
}


@dataclass(frozen=True)
class Case:
    """A job of `nnodes` x `nproc` ranks, and how the platform is asked to start them."""

    platform: type[Platform]
    mode: str  # per-process: the platform starts every rank; per-node: one per node, then crosstrain's launcher
    nnodes: int
    nproc: int
    master_addr: str
    master_port: int
    always_rendezvous: bool

    @property
    def topology(self) -> Topology:
        """What the platform itself starts."""
        per_platform = self.nproc if self.mode == "per-process" else 1
        return Topology(self.nnodes, per_platform, self.master_addr, self.master_port, "job-1", self.always_rendezvous)

    def master(self) -> tuple[str, int]:
        """Where the processes meet, as the platform's variables say: the topology's, except where a platform
        sets no rendezvous variable on one node (then its documented default)."""
        if self.nnodes == 1 and not self.always_rendezvous:
            if self.platform is VertexAI:
                return LOCALHOST, DEFAULT_MASTER_PORT
            if self.platform is AzureMLMPI:
                return self.master_addr, AZURE_MASTER_PORT
        return self.master_addr, self.master_port


def _hosts() -> st.SearchStrategy[str]:
    label = st.from_regex(r"[a-z][a-z0-9-]{0,14}[a-z0-9]", fullmatch=True)
    names = st.lists(label, min_size=1, max_size=3).map(".".join)
    ips = st.lists(st.integers(0, 255), min_size=4, max_size=4).map(lambda parts: ".".join(map(str, parts)))
    return st.one_of(names, ips, st.just("127.0.0.1"))


@st.composite
def cases(draw: st.DrawFn, platform: type[Platform]) -> Case:
    return Case(
        platform,
        draw(st.sampled_from(platform.launch_modes)),
        draw(st.integers(1, 8)),
        draw(st.integers(1, 8)),
        draw(_hosts()),
        draw(st.integers(1, 65535)),
        draw(st.booleans()),
    )


def expected_place(case: Case, index: int) -> ClusterEnv:
    """Where the `index`-th process the platform starts stands, as its variables can tell."""
    t, addr_port = case.topology, case.master()
    name = {VertexAI: "vertex", AIPlatformTraining: "aiplatform"}.get(case.platform, case.platform.name)
    if case.platform in (VertexAI, AIPlatformTraining, DatabricksAIR):  # one process per node: node facts only
        return ClusterEnv(name, t.nnodes, index, None, *addr_port)
    rank, node, local = t.ranks()[index]
    if case.platform is Databricks and t.nnodes > 1:  # one torchrun "node" per Spark task: a task is a node
        return ClusterEnv(name, t.world_size, rank, 1, *addr_port, rank, 0, t.world_size)
    if case.platform is AzureMLPyTorch and node == 0:  # the documented variables do not tell node 0's size
        return ClusterEnv(name, None, 0, None, *addr_port, rank, local, t.world_size)
    return ClusterEnv(name, t.nnodes, node, t.nproc_per_node, *addr_port, rank, local, t.world_size)


def expected_needs_launcher(case: Case, place: ClusterEnv) -> bool:
    if case.platform in (VertexAI, AIPlatformTraining, DatabricksAIR):
        return True
    # one process per machine on a machine-level platform is a node in disguise, once the node count is known
    machine_level = case.platform in (AzureMLPyTorch, AzureMLMPI)
    return machine_level and case.topology.nproc_per_node == 1 and place.nnodes is not None


@pytest.mark.parametrize("name", sorted(EMULATED))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_process_reads_back_its_place(name: str, data: st.DataObject) -> None:
    case = data.draw(cases(EMULATED[name]))
    environments = case.platform.emulate(case.topology)
    assert len(environments) == case.topology.world_size
    for index, environ in enumerate(environments):
        seen, expected = detect(environ), expected_place(case, index)
        assert seen == expected, (index, environ)
        assert seen.needs_launcher == expected_needs_launcher(case, expected)


def what_the_command_sees(case: Case, environ: dict[str, str]) -> list[dict[str, str]]:
    """The environments of the processes that run the user's command, from one process the platform started:
    itself where it is a rank; else what crosstrain's launcher (with the node count and processes per node a
    backend renders) and the torchrun it starts give each rank."""
    if case.mode == "per-process":
        return [environ]
    env = with_node_count(detect(environ), case.nnodes)
    line = plan(env, str(case.nproc), CMD)
    if line == CMD:
        return [child_environment(environ, env, line)]
    flags = dict(arg[2:].split("=", 1) for arg in line if arg.startswith("--") and "=" in arg)
    assert flags["nproc_per_node"] == str(case.nproc)
    torchrun = Topology(int(flags["nnodes"]), case.nproc, flags["master_addr"], int(flags["master_port"]))
    node_rank = int(flags["node_rank"])
    inherited = child_environment(environ, env, line)
    return [
        {**inherited, **worker} for worker in TorchElastic.emulate(torchrun) if worker["GROUP_RANK"] == str(node_rank)
    ]


def left_out_by_the_platform(case: Case) -> frozenset[str]:
    """torchrun's variables that a platform starting the user's command itself does not set (the launcher is not in
    between to add them): Azure ML documents no LOCAL_WORLD_SIZE or GROUP_RANK; MPI sets only OMPI_COMM_WORLD_*
    (runtime.init() exports the rest for env:// code); torchrun sets no NODE_RANK, which Databricks' Spark tasks
    set in distributed mode only."""
    if case.mode == "per-node":
        return frozenset()
    if case.platform is AzureMLPyTorch:
        return frozenset({"LOCAL_WORLD_SIZE", "GROUP_RANK"})
    if case.platform is AzureMLMPI:
        return frozenset(TORCHRUN_VARIABLES)
    if case.platform is TorchElastic or (case.platform is Databricks and case.nnodes == 1):
        return frozenset({"NODE_RANK"})
    if case.platform is PlainEnv:
        return frozenset({"GROUP_RANK"})
    return frozenset()


def _rank(environ: dict[str, str]) -> int:
    return int(environ.get("RANK") or environ["OMPI_COMM_WORLD_RANK"])


@pytest.mark.parametrize("name", sorted(EMULATED))
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_the_users_command_sees_torchruns_variables(name: str, data: st.DataObject) -> None:
    """Vertex's node-level RANK (Lightning-AI/pytorch-lightning#13374) never reaches the command as a rank: every
    rank sees its global RANK, the process WORLD_SIZE, and its node as NODE_RANK and GROUP_RANK."""
    case = data.draw(cases(EMULATED[name]))
    seen: list[dict[str, str]] = []
    for environ in case.platform.emulate(case.topology):
        seen += what_the_command_sees(case, environ)
    job = Topology(case.nnodes, case.nproc)
    if case.platform is Databricks and case.nnodes > 1:
        job = Topology(job.world_size, 1)  # its torchrun nodes are Spark tasks
    addr, port = case.master()
    left_out = left_out_by_the_platform(case)
    assert len(seen) == job.world_size
    for (rank, node, local), environ in zip(job.ranks(), sorted(seen, key=_rank), strict=True):
        wanted = {
            "RANK": str(rank),
            "WORLD_SIZE": str(job.world_size),
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": str(job.nproc_per_node),
            "NODE_RANK": str(node),
            "GROUP_RANK": str(node),
            "MASTER_ADDR": addr,
            "MASTER_PORT": str(port),
        }
        got = {k: environ.get(k) for k in TORCHRUN_VARIABLES}
        assert {k: v for k, v in got.items() if k not in left_out} == {
            k: v for k, v in wanted.items() if k not in left_out
        }
        assert all(got[k] in (None, wanted[k]) for k in left_out)  # left out, never wrong
        place = detect(environ)  # and the runtime agrees, as runtime.init() would join
        assert (place.rank, place.world_size, place.local_rank) == (rank, job.world_size, local)


def test_every_detected_platform_has_a_module_that_emulates_it() -> None:
    emulated = {p.name for p in EMULATED.values()}
    assert {p.name for p in PLATFORMS} - emulated == {SingleProcess.name}
    assert detect(SingleProcess.emulate(Topology(1))[0]).platform == "single"
    with pytest.raises(ValueError, match="no way to join 2 nodes"):
        SingleProcess.emulate(Topology(2))
