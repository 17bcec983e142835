"""What every platform module shares: the record a node's environment is read into (`ClusterEnv`), the error
that names the platform and the variable, the reader that raises it, the topology a platform is asked to emulate,
and the `Platform` interface: `detect`/`read` on a node, `emulate` for a local run. Standard library only."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from crosstrain.errors import CrosstrainError

OVERRIDE_VARIABLE = "CROSSTRAIN_PLATFORM"
# Used when a platform names no port (Vertex AI documents none); torchrun's own default.
DEFAULT_MASTER_PORT = 29500
LOCALHOST = "127.0.0.1"
# The port Vertex AI and AI Platform give every replica in CLUSTER_SPEC / TF_CONFIG.
CLUSTER_SPEC_PORT = 2222
# The raw variables worth showing when something is wrong (values of these are never secrets).
_DEBUG_PREFIXES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_",
    "NODE_RANK",
    "GROUP_",
    "MASTER_",
    "OMPI_COMM_WORLD_",
    "PMI_",
    "MPI_LOCAL",
    "MV2_COMM_WORLD_",
    "AZ_BATCH",
    "AZUREML_NODE_COUNT",
    "AZUREML_CR_NODE_RANK",
    "CLUSTER_SPEC",
    "TF_CONFIG",
    "CLOUD_ML_JOB_ID",
    "TORCHELASTIC_",
    OVERRIDE_VARIABLE,
)
# Platforms whose processes are process-level but whose "node" is a machine: with one process per node, a
# launcher may expand it (filled by `Platform` subclasses that say `machine_level = True`).
_MACHINE_LEVEL: set[str] = set()


class ClusterEnvError(CrosstrainError, RuntimeError):
    """The environment is missing a variable or contradicts itself; names the platform and the variable."""

    def __init__(self, platform: str, variable: str, problem: str, fix: str = "") -> None:
        self.platform, self.variable, self.problem, self.fix = platform, variable, problem, fix
        text = f"{platform}: {variable}: {problem}"
        super().__init__(f"{text}\n    fix: {fix}" if fix else text)


@dataclass(frozen=True)
class ClusterEnv:
    """Node facts and process facts, kept apart.

    `rank`, `local_rank` and `world_size` are None where the platform started one process per node and a
    launcher (`python -m crosstrain.launch`) still has to start the per-GPU processes. `nnodes`, `node_rank`
    and `nproc_per_node` are None only where the platform does not say (e.g. Azure ML's documented variables
    on node 0 do not tell how many processes a node runs).
    """

    platform: str
    nnodes: int | None
    node_rank: int | None
    nproc_per_node: int | None
    master_addr: str
    master_port: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    # The raw variables this was read from, for error messages and debug logs.
    variables: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def process_level(self) -> bool:
        """True when this process is one rank of the job (as opposed to one process per node)."""
        return self.rank is not None

    @property
    def needs_launcher(self) -> bool:
        """True when per-GPU processes still have to be started on this node.

        Node-level platforms always need it. So do platforms whose processes are process-level but known to
        run one per machine (Azure ML with `process_count_per_instance: 1`): there `RANK`/`WORLD_SIZE` are
        the node rank and node count in disguise. torchelastic's children (Databricks included) never do.
        """
        if not self.process_level:
            return True
        return self.platform in _MACHINE_LEVEL and self.nproc_per_node == 1 and self.nnodes is not None

    def one_process_per_node(self) -> ClusterEnv:
        """A node-level context read as one rank per node: how a job runs where the platform starts one process
        per node and no launcher started more (a CPU or one-GPU node; backends wrap multi-GPU nodes)."""
        if self.process_level or self.nnodes is None or self.node_rank is None:
            return self
        return dataclasses.replace(self, nproc_per_node=1, rank=self.node_rank, local_rank=0, world_size=self.nnodes)

    def torch_variables(self) -> dict[str, str]:
        """What torchrun gives each process it starts (`init_method="env://"` reads the first four), for a
        process-level context: frameworks (Lightning, Accelerate) read `LOCAL_*`, `NODE_RANK` or `GROUP_RANK`."""
        if not self.process_level:
            raise ClusterEnvError(
                self.platform,
                "RANK",
                "this process is one per node, not one rank of the job",
                "start the per-GPU processes with `python -m crosstrain.launch -- CMD ...`",
            )
        values = {
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
        }
        if self.nproc_per_node is not None:
            values["LOCAL_WORLD_SIZE"] = str(self.nproc_per_node)
        if self.node_rank is not None:
            values["NODE_RANK"] = values["GROUP_RANK"] = str(self.node_rank)
        return values

    def describe(self) -> str:
        """One topology line for logs."""
        process = f"rank {self.rank}/{self.world_size} local {self.local_rank}" if self.process_level else "per-node"
        per_node = f" x {self.nproc_per_node} per node" if self.nproc_per_node else ""  # unsaid: not guessed
        master = f"master {self.master_addr}:{self.master_port}"
        return f"{self.platform}: node {self.node_rank}/{self.nnodes}{per_node}, {process}, {master}"


@dataclass(frozen=True)
class Topology:
    """What a platform is asked to start, for `Platform.emulate`: `nnodes` nodes, `nproc_per_node` processes the
    platform starts on each (1 where it starts one per node and a launcher starts the ranks), and the rendezvous.

    `master_port` may be a placeholder filled in later (a local run's free port). `always_rendezvous` sets the
    rendezvous variables even where the platform leaves them out (one node), so that runs side by side on one
    machine never meet on a default port.
    """

    nnodes: int
    nproc_per_node: int = 1
    master_addr: str = LOCALHOST
    master_port: int | str = DEFAULT_MASTER_PORT
    job_id: str = "local-emulation"
    always_rendezvous: bool = False

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    def endpoint(self, node: int) -> str:
        """`host:port` of a node where a platform lists them (CLUSTER_SPEC, TF_CONFIG). On the cloud each node
        is its own host at port 2222; here they share the master's host, each at its own port from 2222."""
        return f"{self.master_addr}:{CLUSTER_SPEC_PORT + node}"

    def ranks(self) -> list[tuple[int, int, int]]:
        """(rank, node, local rank) of every process the platform starts, node by node."""
        return [(n * self.nproc_per_node + i, n, i) for n in range(self.nnodes) for i in range(self.nproc_per_node)]


class Reader:
    """Reads one platform's variables, raising `ClusterEnvError` that names the platform and the variable."""

    def __init__(self, platform: str, environ: Mapping[str, str]) -> None:
        self.platform, self.environ = platform, environ

    def error(self, variable: str, problem: str, fix: str = "") -> ClusterEnvError:
        shown = {k: v for k, v in sorted(self.environ.items()) if k.startswith(_DEBUG_PREFIXES)}
        dump = ", ".join(f"{k}={v[:200]}" for k, v in shown.items()) or "none of the usual variables"
        return ClusterEnvError(self.platform, variable, f"{problem} (seen: {dump})", fix)

    def text(self, name: str, default: str | None = None) -> str:
        value = self.environ.get(name, "").strip()
        if value:
            return value
        if default is not None:
            return default
        raise self.error(name, "is not set", f"this platform sets {name}; set it, or {OVERRIDE_VARIABLE} to another")

    def integer(self, name: str, default: int | None = None, *, minimum: int = 0) -> int:
        raw = self.environ.get(name, "").strip()
        if not raw:
            if default is not None:
                return default
            raise self.error(
                name, "is not set", f"this platform sets {name}; set it, or {OVERRIDE_VARIABLE} to another"
            )
        try:
            value = int(raw)
        except ValueError:
            raise self.error(name, f"is {raw!r}, not an integer") from None
        if value < minimum:
            raise self.error(name, f"is {value}, must be at least {minimum}")
        return value

    def optional_integer(self, name: str, *, minimum: int = 0) -> int | None:
        return self.integer(name, minimum=minimum) if self.environ.get(name, "").strip() else None

    def port(self, name: str, default: int) -> int:
        value = self.integer(name, default, minimum=1)
        if value > 65535:
            raise self.error(name, f"is {value}, not a TCP port")
        return value

    def json_object(self, name: str) -> dict[str, Any]:
        raw = self.text(name)
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise self.error(name, f"is not valid JSON ({exc.msg} at position {exc.pos})") from None
        if not isinstance(value, dict):
            raise self.error(name, f"is JSON {type(value).__name__}, not an object")
        return value

    def check_rank(self, rank_name: str, rank: int, size_name: str, size: int) -> None:
        if rank >= size:
            raise self.error(rank_name, f"is {rank}, but {size_name} is {size}: a rank must be below the size")


def is_set(environ: Mapping[str, str], *names: str) -> bool:
    return all(environ.get(name, "").strip() for name in names)


class Platform:
    """One way a process can have been started, both directions: `detect`/`read` turn a node's environment into
    a `ClusterEnv`; `emulate` writes the variables the platform sets for each process it starts."""

    name: ClassVar[str]
    #: Who starts the ranks: "per-process" (the platform starts every rank), "per-node" (one process per node,
    #: crosstrain's launcher starts the ranks), or both (the job's launch mode decides).
    launch_modes: ClassVar[tuple[str, ...]] = ("per-process",)
    #: Process-level, but one process per node means one per machine (a launcher may expand it).
    machine_level: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("machine_level"):
            _MACHINE_LEVEL.add(cls.name)

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        raise NotImplementedError

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        raise NotImplementedError

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """The variables this platform sets for each process it starts, node by node (one per node where it
        starts one per node), as `read` finds them on the platform."""
        raise NotImplementedError
