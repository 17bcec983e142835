"""How a platform's nodes run on this machine (`crosstrain run --local --emulate NAME`).

A platform package declares its `Emulation`: the names it is emulated under, the placeholder account settings
its request is rendered with where the job file has none, and `nodes`, which reads the platform's own rendered
request and returns the processes its nodes would start, with the variables the platform sets for each. The
`local` backend renders the job for that platform, asks its emulation for the nodes, and runs them; it names no
platform itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from crosstrain.errors import Problem, SpecError
from crosstrain.frozen import frozen

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.runtime.platforms import Topology
    from crosstrain.spec import TrainingJob

LOOPBACK = "127.0.0.1"
# Filled in when the run starts: a free TCP port, the run's scratch folder, and the caller's PATH.
PORT, RUN_DIR, PATH = "${MASTER_PORT}", "${RUN_DIR}", "${PATH}"
# Where a job's code bundle is unpacked for the run (a folder of its own, made when the run starts).
STAGE_DIR = "${STAGE_DIR}"


@dataclasses.dataclass
class Node:
    """One process of a local run, as rendered: a node's torchrun agent, a rank, or a Databricks driver."""

    name: str
    node: int
    ranks: list[int]
    argv: list[str]
    env: dict[str, str]
    agent: bool = False  # a torchrun agent that starts the ranks (their exit codes come from its events)
    #: "spark": a driver whose ranks' lines come tagged `[rankN]`, each twice (a local Spark relays a task's
    #: output both through TorchDistributor's log stream and through the worker's own stderr).
    relays: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "node": self.node,
            "ranks": self.ranks,
            "agent": "torchrun" if self.agent else None,
            **({"relays": self.relays} if self.relays else {}),
            "argv": self.argv,
            "env": self.env,
        }


#: (the platform's rendered request, the job exactly as it rendered it, processes per node) -> the processes.
NodesOf = Callable[["Request", "TrainingJob", int], list[Node]]


@frozen
class Emulation:
    """What `--emulate NAME` needs from a platform. `variants` maps each emulation name to the `launch` fields
    it sets on the job (Azure ML's `azureml-mpi` is `{"framework": "mpi"}`)."""

    variants: Mapping[str, Mapping[str, Any]]
    placeholder_settings: Mapping[str, str]
    nodes: NodesOf
    #: The machine a pool is rendered with when the platform wants one: the local processes per node, not a
    #: machine's GPUs, decide how many processes the platform starts. None: the platform's own machine is kept.
    cpu_machine: str | None = None
    #: Whether the platform is told this machine's processes per node (a Databricks run sets its own).
    sets_processes_per_node: bool = True
    #: Whether each node can be given its own GPUs here (a local SparkSession has none).
    gpus: bool = True
    #: Whether the job's reduction server is accepted (and left out: the nodes all-reduce directly).
    reduction_server: bool = False
    #: Raises `MissingDependency` when this machine lacks what the emulation runs on (a local Spark).
    requirements: Callable[[], None] | None = None
    #: The target's settings that give the job an environment of their own making (Azure ML's `build`): a job
    #: that sets one is rendered without the placeholder image that stands in for a job's missing one.
    environment_settings: tuple[str, ...] = ()
    #: Whether the platform's rendered request sends the user's files as one archive that the bootstrap unpacks
    #: (`crosstrain.code_archive`): the run's stage then holds the archive, not the files. None: never.
    archived: Callable[[Request], bool] | None = None


def ranks(node: int, nproc: int) -> list[int]:
    return list(range(node * nproc, (node + 1) * nproc))


def topology(nodes: int, per_node: int, job_id: str) -> Topology:
    """The emulated platform's nodes, all on loopback, meeting at the run's free port: set even on one node, where
    a platform would leave a fixed default (29500) that runs side by side on this machine would share."""
    from crosstrain.runtime.platforms import Topology  # the node side's, loaded for a local run only

    return Topology(nodes, per_node, LOOPBACK, PORT, job_id, always_rendezvous=True)


def runs_torchrun(argv: list[str]) -> bool:
    """True when the node's command starts its ranks through torchrun (crosstrain's launcher does); Azure ML's
    command is one shell string."""
    line = " ".join(argv)
    return "crosstrain.launch" in line or "torch.distributed.run" in line


def node_process(node: int, nproc: int, argv: list[str], env: dict[str, str]) -> Node:
    """A node's one process: a torchrun agent when it runs the launcher, else the only rank of its node."""
    if not argv:
        raise SpecError(
            [Problem("command", "the image's own entrypoint cannot run here", "set `command`, e.g. python train.py")]
        )
    agent = runs_torchrun(argv)
    return Node(f"node{node}", node, ranks(node, nproc) if agent else [node], argv, env, agent=agent)
