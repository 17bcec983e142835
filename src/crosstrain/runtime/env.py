"""Who started this process, and what the platform's variables mean here: one small class per platform.

Several platforms export `RANK` and `WORLD_SIZE` with *node* meaning (Vertex AI, AI Platform Training, Azure ML
with one process per node), while `torch.distributed`'s `env://` wants *process* values. So `detect()` first
decides which platform launched this process (the first class in `PLATFORMS` whose `detect()` is true, or the
one `CROSSTRAIN_PLATFORM` names) and only then reads its variables. Standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from crosstrain.errors import CrosstrainError

log = logging.getLogger("crosstrain.runtime")

OVERRIDE_VARIABLE = "CROSSTRAIN_PLATFORM"
# Used when a node-level platform names no port (Vertex AI documents none); torchrun's own default.
DEFAULT_MASTER_PORT = 29500
AZURE_MASTER_PORT = 6105  # what Azure ML sets, per its v1 docs
LOCALHOST = "127.0.0.1"
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
        return self.platform in _MACHINE_LEVEL_PLATFORMS and self.nproc_per_node == 1 and self.nnodes is not None

    def one_process_per_node(self) -> ClusterEnv:
        """A node-level context read as one rank per node: how a job runs where the platform starts one process
        per node and no launcher started more (a CPU or one-GPU node; backends wrap multi-GPU nodes)."""
        if self.process_level or self.nnodes is None or self.node_rank is None:
            return self
        return dataclasses.replace(self, nproc_per_node=1, rank=self.node_rank, local_rank=0, world_size=self.nnodes)

    def __enter__(self) -> ClusterEnv:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """`with runtime.init() as env:` destroys the process group on the way out, on error too."""
        from crosstrain.runtime.dist import shutdown

        shutdown()

    def torch_variables(self) -> dict[str, str]:
        """The variables `init_process_group(init_method="env://")` reads, for a process-level context."""
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
            values["NODE_RANK"] = str(self.node_rank)
        return values

    def describe(self) -> str:
        """One topology line for logs."""
        process = f"rank {self.rank}/{self.world_size} local {self.local_rank}" if self.process_level else "per-node"
        return (
            f"{self.platform}: node {self.node_rank}/{self.nnodes} x {self.nproc_per_node or '?'} per node, "
            f"{process}, master {self.master_addr}:{self.master_port}"
        )


class _Reader:
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


class Platform:
    """One way a process can have been started. Subclasses say how to recognize and read it."""

    name: ClassVar[str]

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        raise NotImplementedError

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        raise NotImplementedError


def _set(environ: Mapping[str, str], *names: str) -> bool:
    return all(environ.get(name, "").strip() for name in names)


class TorchElastic(Platform):
    """torchrun / torchelastic: every variable is process-level. Covers Databricks TorchDistributor (one
    torchrun "node" per Spark task) and the children of crosstrain's own launcher."""

    name = "torchelastic"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return _set(environ, "TORCHELASTIC_RUN_ID")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        world_size, rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
        local_world_size, local_rank = r.integer("LOCAL_WORLD_SIZE", minimum=1), r.integer("LOCAL_RANK")
        r.check_rank("RANK", rank, "WORLD_SIZE", world_size)
        r.check_rank("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", local_world_size)
        nnodes = r.integer("GROUP_WORLD_SIZE", world_size // local_world_size, minimum=1)
        node_rank = r.integer("GROUP_RANK")
        r.check_rank("GROUP_RANK", node_rank, "GROUP_WORLD_SIZE", nnodes)
        return ClusterEnv(
            cls.name,
            nnodes,
            node_rank,
            local_world_size,
            r.text("MASTER_ADDR"),
            r.port("MASTER_PORT", DEFAULT_MASTER_PORT),
            rank,
            local_rank,
            world_size,
            variables=environ,
        )


class AzureMLPyTorch(Platform):
    """Azure ML `pytorch` distribution: `MASTER_*`, `WORLD_SIZE`, `NODE_RANK` per node; `RANK`, `LOCAL_RANK`
    per process. With one process per node these are node rank and node count in disguise."""

    name = "azureml-pytorch"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        azure = any(k.startswith(("AZUREML_", "AZ_BATCH")) for k in environ)
        return azure and _set(environ, "NODE_RANK", "LOCAL_RANK")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        world_size, rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
        node_rank, local_rank = r.integer("NODE_RANK"), r.integer("LOCAL_RANK")
        r.check_rank("RANK", rank, "WORLD_SIZE", world_size)
        per_node = cls._processes_per_node(r, world_size, rank, node_rank, local_rank)
        nnodes = None
        if per_node is not None:
            if world_size % per_node:
                raise r.error("WORLD_SIZE", f"is {world_size}, not a multiple of {per_node} processes per node")
            nnodes = world_size // per_node
            r.check_rank("LOCAL_RANK", local_rank, "the processes per node", per_node)
            r.check_rank("NODE_RANK", node_rank, "the node count", nnodes)
            if rank != node_rank * per_node + local_rank:
                raise r.error(
                    "RANK",
                    f"is {rank}, but NODE_RANK {node_rank} x {per_node} per node + LOCAL_RANK {local_rank} "
                    f"is {node_rank * per_node + local_rank}",
                )
        return ClusterEnv(
            cls.name,
            nnodes,
            node_rank,
            per_node,
            r.text("MASTER_ADDR"),
            r.port("MASTER_PORT", AZURE_MASTER_PORT),
            rank,
            local_rank,
            world_size,
            variables=environ,
        )

    @staticmethod
    def _processes_per_node(r: _Reader, world_size: int, rank: int, node_rank: int, local_rank: int) -> int | None:
        """From `LOCAL_WORLD_SIZE`, else the node count (`AZUREML_NODE_COUNT`, `AZ_BATCH_HOST_LIST`), else the
        ranks of a node other than 0; None where nothing tells (node 0 with only the documented variables)."""
        explicit = r.optional_integer("LOCAL_WORLD_SIZE", minimum=1)
        if explicit is not None:
            return explicit
        nodes = r.optional_integer("AZUREML_NODE_COUNT", minimum=1)
        if nodes is None and r.environ.get("AZ_BATCH_HOST_LIST", "").strip():
            nodes = len([h for h in r.environ["AZ_BATCH_HOST_LIST"].split(",") if h.strip()])
        if nodes is not None:
            if world_size % nodes:
                raise r.error("WORLD_SIZE", f"is {world_size}, not a multiple of the {nodes} nodes")
            return world_size // nodes
        if node_rank > 0:
            return max((rank - local_rank) // node_rank, 1)
        return None


class _MPIFamily:
    def __init__(self, rank: str, size: str, local_rank: str, local_size: str) -> None:
        self.rank, self.size, self.local_rank, self.local_size = rank, size, local_rank, local_size


# Only one family is read: mixing (say) PMI_RANK with OMPI_COMM_WORLD_LOCAL_SIZE gives nonsense.
_MPI_FAMILIES = (
    _MPIFamily(
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"
    ),
    _MPIFamily("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    _MPIFamily("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
)


class AzureMLMPI(Platform):
    """Azure ML `mpi` distribution: `mpirun` started the processes; Open MPI variables, else Intel MPI/MPICH
    (`PMI_*`), else MVAPICH. The node rank is rank // local size (`OMPI_COMM_WORLD_NODE_RANK` is not it)."""

    name = "azureml-mpi"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return any(_set(environ, family.rank) for family in _MPI_FAMILIES)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        family = next((f for f in _MPI_FAMILIES if _set(environ, f.rank)), _MPI_FAMILIES[0])
        rank, world_size = r.integer(family.rank), r.integer(family.size, minimum=1)
        local_rank, local_size = r.integer(family.local_rank), r.integer(family.local_size, minimum=1)
        r.check_rank(family.rank, rank, family.size, world_size)
        r.check_rank(family.local_rank, local_rank, family.local_size, local_size)
        if world_size % local_size:
            raise r.error(family.size, f"is {world_size}, not a multiple of {family.local_size} {local_size}")
        nnodes, node_rank = world_size // local_size, rank // local_size
        if rank % local_size != local_rank:
            raise r.error(
                family.local_rank,
                f"is {local_rank}, but {family.rank} {rank} mod {family.local_size} {local_size} is "
                f"{rank % local_size}: crosstrain expects ranks to fill one node after another",
            )
        addr, port = cls._master(r, nnodes)
        return ClusterEnv(
            cls.name, nnodes, node_rank, local_size, addr, port, rank, local_rank, world_size, variables=environ
        )

    @staticmethod
    def _master(r: _Reader, nnodes: int) -> tuple[str, int]:
        """`AZ_BATCH_MASTER_NODE` (`addr:port`, multi-node only), else `AZ_BATCHAI_MPI_MASTER_NODE` (a host),
        else localhost on one node. `MASTER_ADDR`/`MASTER_PORT`, where set, win."""
        addr, port = r.environ.get("MASTER_ADDR", "").strip(), r.environ.get("MASTER_PORT", "").strip()
        batch = r.environ.get("AZ_BATCH_MASTER_NODE", "").strip()
        if batch and not addr:
            host, sep, batch_port = batch.rpartition(":")
            if not sep or not host or not batch_port.isdigit():
                raise r.error("AZ_BATCH_MASTER_NODE", f"is {batch!r}, not host:port")
            addr, port = host, port or batch_port
        addr = addr or r.environ.get("AZ_BATCHAI_MPI_MASTER_NODE", "").strip()
        if not addr:
            if nnodes > 1:
                raise r.error(
                    "AZ_BATCH_MASTER_NODE",
                    f"is not set, and neither is AZ_BATCHAI_MPI_MASTER_NODE or MASTER_ADDR, on a {nnodes}-node job",
                    "run under an Azure ML `mpi` job, or set MASTER_ADDR and MASTER_PORT",
                )
            addr = LOCALHOST
        return addr, _Reader(r.platform, {"MASTER_PORT": port}).port("MASTER_PORT", AZURE_MASTER_PORT)


class VertexAI(Platform):
    """Vertex AI CustomJob: one process per replica. `CLUSTER_SPEC` says which pool and index this replica
    is; pool 0 is node 0 and pool 1's replica i is node i + 1. Pool 2 (reduction server or parameter
    servers) and pool 3 (evaluators) are not training nodes. `RANK`/`WORLD_SIZE`, where set, count nodes and
    are only a cross-check."""

    name = "vertex"
    TRAINING_POOLS = ("workerpool0", "workerpool1")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """A `CLUSTER_SPEC` with worker pools (an unreadable one too, so that `read` says what is wrong);
        AI Platform's master/worker form belongs to `AIPlatformTraining`."""
        return _set(environ, "CLUSTER_SPEC") and not _legacy_cluster_spec(environ)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        spec = r.json_object("CLUSTER_SPEC")
        cluster, task = spec.get("cluster"), spec.get("task")
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise r.error("CLUSTER_SPEC", "has no `cluster` and `task` objects")
        pools = {}
        for pool in cls.TRAINING_POOLS:
            hosts = cluster.get(pool, [])
            if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
                raise r.error("CLUSTER_SPEC", f"cluster.{pool} is not a list of host:port strings")
            pools[pool] = hosts
        if len(pools["workerpool0"]) != 1:
            raise r.error("CLUSTER_SPEC", f"cluster.workerpool0 has {len(pools['workerpool0'])} replicas, not 1")
        kind, index = task.get("type"), task.get("index")
        if kind not in cls.TRAINING_POOLS:
            raise r.error(
                "CLUSTER_SPEC",
                f"task.type is {kind!r}: this replica is not a training node (pool 2 runs the reduction server or "
                "parameter servers, pool 3 evaluators)",
                "run the training command (and crosstrain.launch) only in worker pools 0 and 1",
            )
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(pools[kind]):
            raise r.error("CLUSTER_SPEC", f"task.index is {index!r}, not an index into cluster.{kind}")
        nnodes = len(pools["workerpool0"]) + len(pools["workerpool1"])
        node_rank = 0 if kind == "workerpool0" else 1 + index
        cls._cross_check(r, nnodes, node_rank)
        primary_host = pools["workerpool0"][0].rpartition(":")[0] or pools["workerpool0"][0]
        addr = r.text("MASTER_ADDR", LOCALHOST if nnodes == 1 else primary_host)
        return ClusterEnv(
            cls.name, nnodes, node_rank, None, addr, r.port("MASTER_PORT", DEFAULT_MASTER_PORT), variables=environ
        )

    @staticmethod
    def _cross_check(r: _Reader, nnodes: int, node_rank: int) -> None:
        """Vertex's node-level `WORLD_SIZE`/`RANK` are undocumented (whether reducer or evaluator replicas count
        in them is unknown), so a disagreement with `CLUSTER_SPEC`, the authority, is only logged."""
        for name, expected in (("WORLD_SIZE", nnodes), ("RANK", node_rank)):
            seen = r.optional_integer(name)
            if seen is not None and seen != expected:
                log.warning("vertex: %s is %s, but CLUSTER_SPEC says %s; following CLUSTER_SPEC", name, seen, expected)


class AIPlatformTraining(Platform):
    """Legacy AI Platform Training: one process per node; `RANK` is the node index and `WORLD_SIZE` the node
    count (its PyTorch guide); `TF_CONFIG`'s task (`master`/`chief` → 0, `worker` i → i + 1) where they are
    not set."""

    name = "aiplatform"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return _set(environ, "CLOUD_ML_JOB_ID") and (not _set(environ, "CLUSTER_SPEC") or _legacy_cluster_spec(environ))

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        if _set(environ, "WORLD_SIZE") or _set(environ, "RANK"):
            nnodes, node_rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
            r.check_rank("RANK", node_rank, "WORLD_SIZE", nnodes)
        elif _set(environ, "CLUSTER_SPEC"):  # the container guide's form of TF_CONFIG: master/worker keys
            nnodes, node_rank = cls._from_tf_config(r, "CLUSTER_SPEC")
        elif _set(environ, "TF_CONFIG"):
            nnodes, node_rank = cls._from_tf_config(r, "TF_CONFIG")
        else:
            nnodes, node_rank = 1, 0
        addr = r.text("MASTER_ADDR", None if nnodes > 1 else LOCALHOST)
        return ClusterEnv(
            cls.name, nnodes, node_rank, None, addr, r.port("MASTER_PORT", DEFAULT_MASTER_PORT), variables=environ
        )

    @staticmethod
    def _from_tf_config(r: _Reader, variable: str) -> tuple[int, int]:
        config = r.json_object(variable)
        cluster, task = config.get("cluster", {}), config.get("task", {})
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise r.error(variable, "has no `cluster` and `task` objects")
        workers = cluster.get("worker", [])
        nnodes = 1 + (len(workers) if isinstance(workers, list) else 0)
        kind, index = task.get("type"), task.get("index", 0)
        if kind in ("master", "chief"):
            return nnodes, 0
        if kind == "worker" and isinstance(index, int) and 0 <= index < nnodes - 1:
            return nnodes, index + 1
        raise r.error(variable, f"task is {task!r}: not a training node (master, chief or worker)")


def _legacy_cluster_spec(environ: Mapping[str, str]) -> bool:
    """AI Platform Training's `CLUSTER_SPEC` names `master`/`chief` and `worker` pools, Vertex's `workerpoolN`."""
    try:
        cluster = json.loads(environ["CLUSTER_SPEC"]).get("cluster")
    except (ValueError, AttributeError):
        return False
    return isinstance(cluster, dict) and bool(cluster) and not any(str(k).startswith("workerpool") for k in cluster)


class PlainEnv(Platform):
    """Plain `env://`: someone set `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` per process.
    Without `LOCAL_RANK` each process is taken to be alone on its machine."""

    name = "env"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return _set(environ, "RANK", "WORLD_SIZE", "MASTER_ADDR")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        world_size, rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
        r.check_rank("RANK", rank, "WORLD_SIZE", world_size)
        addr, port = r.text("MASTER_ADDR"), r.port("MASTER_PORT", DEFAULT_MASTER_PORT)
        if not _set(environ, "LOCAL_RANK"):
            return ClusterEnv(cls.name, world_size, rank, 1, addr, port, rank, 0, world_size, variables=environ)
        local_rank = r.integer("LOCAL_RANK")
        per_node = r.optional_integer("LOCAL_WORLD_SIZE", minimum=1)
        nnodes = node_rank = None
        if per_node is not None:
            r.check_rank("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", per_node)
            if world_size % per_node:
                raise r.error("WORLD_SIZE", f"is {world_size}, not a multiple of LOCAL_WORLD_SIZE {per_node}")
            nnodes, node_rank = world_size // per_node, rank // per_node
        if _set(environ, "NODE_RANK"):
            node_rank = r.integer("NODE_RANK")
        return ClusterEnv(
            cls.name, nnodes, node_rank, per_node, addr, port, rank, local_rank, world_size, variables=environ
        )


class SingleProcess(Platform):
    """Nothing distributed is set: one process, rank 0 of 1 (the launcher may still start one per GPU)."""

    name = "single"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return True

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = _Reader(cls.name, environ)
        world_size = r.integer("WORLD_SIZE", 1, minimum=1)
        if world_size > 1:
            missing = [n for n in ("RANK", "MASTER_ADDR") if not _set(environ, n)]
            raise r.error(
                missing[0] if missing else "WORLD_SIZE",
                f"is not set, but WORLD_SIZE is {world_size}: no platform's variables are complete",
                f"set RANK, MASTER_ADDR and MASTER_PORT (plain env://), or {OVERRIDE_VARIABLE}",
            )
        port = r.port("MASTER_PORT", DEFAULT_MASTER_PORT)
        return ClusterEnv(cls.name, 1, 0, 1, LOCALHOST, port, 0, 0, 1, variables=environ)


# The documented detection order: the most specific launcher first. torchelastic comes first because torchrun
# may run inside any of the others (Databricks, our own launcher on Vertex); `env` and `single` come last.
PLATFORMS: tuple[type[Platform], ...] = (
    TorchElastic,
    AzureMLPyTorch,
    AzureMLMPI,
    VertexAI,
    AIPlatformTraining,
    PlainEnv,
    SingleProcess,
)
# Process-level platforms whose "node" is a machine: with one process per node, a launcher may expand it.
_MACHINE_LEVEL_PLATFORMS = frozenset({AzureMLPyTorch.name, AzureMLMPI.name, SingleProcess.name})


def detect(environ: Mapping[str, str] | None = None) -> ClusterEnv:
    """The cluster this process runs in: `CROSSTRAIN_PLATFORM` if set, else the first platform that matches."""
    environ = dict(os.environ if environ is None else environ)
    forced = environ.get(OVERRIDE_VARIABLE, "").strip()
    if forced:
        by_name = {p.name: p for p in PLATFORMS}
        platform = by_name.get(forced)
        if platform is None:
            raise ClusterEnvError(
                forced, OVERRIDE_VARIABLE, "names no platform", f"use one of: {', '.join(sorted(by_name))}"
            )
        return platform.read(environ)  # forced: read its variables even where its marker is missing
    return next(p for p in PLATFORMS if p.detect(environ)).read(environ)
