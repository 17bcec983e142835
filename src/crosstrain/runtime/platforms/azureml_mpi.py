"""Azure ML command jobs with the `mpi` distribution: `mpirun` starts the processes with Open MPI's
`OMPI_COMM_WORLD_*` (Intel MPI/MPICH: `PMI_*`, `MPI_LOCAL*`; MVAPICH: `MV2_COMM_WORLD_*`); no `RANK` or `MASTER_*`.
The rendezvous is `AZ_BATCH_MASTER_NODE` (`addr:port`, multi-node jobs only), else `AZ_BATCHAI_MPI_MASTER_NODE` (a
host). `OMPI_COMM_WORLD_NODE_RANK` is not the node rank: that is rank // local size.

Sources: <https://learn.microsoft.com/azure/machine-learning/how-to-train-distributed-gpu#mpi>; the multi-node-only
master variable: Lightning-AI/pytorch-lightning#14118; the node rank: MicrosoftDocs/azure-docs PR #95788.
"""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.azureml import AZURE_MASTER_PORT, job_variables
from crosstrain.runtime.platforms.base import LOCALHOST, ClusterEnv, Platform, Reader, Topology, is_set


class _MPIFamily:
    def __init__(self, rank: str, size: str, local_rank: str, local_size: str) -> None:
        self.rank, self.size, self.local_rank, self.local_size = rank, size, local_rank, local_size


OPEN_MPI = _MPIFamily(
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"
)
# Only one family is read: mixing (say) PMI_RANK with OMPI_COMM_WORLD_LOCAL_SIZE gives nonsense.
_MPI_FAMILIES = (
    OPEN_MPI,
    _MPIFamily("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    _MPIFamily("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"),
)


class AzureMLMPI(Platform):
    """Azure ML `mpi` distribution: `mpirun` started the processes; Open MPI variables, else Intel MPI/MPICH
    (`PMI_*`), else MVAPICH. The node rank is rank // local size (`OMPI_COMM_WORLD_NODE_RANK` is not it)."""

    name = "azureml-mpi"
    machine_level = True

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return any(is_set(environ, family.rank) for family in _MPI_FAMILIES)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        family = next((f for f in _MPI_FAMILIES if is_set(environ, f.rank)), OPEN_MPI)
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
    def _master(r: Reader, nnodes: int) -> tuple[str, int]:
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
        return addr, Reader(r.platform, {"MASTER_PORT": port}).port("MASTER_PORT", AZURE_MASTER_PORT)

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """Open MPI's variables, as `mpirun` sets them on Azure ML's images."""
        t = topology
        master = {"AZ_BATCHAI_MPI_MASTER_NODE": t.master_addr}
        if t.nnodes > 1 or t.always_rendezvous:
            master["AZ_BATCH_MASTER_NODE"] = f"{t.master_addr}:{t.master_port}"
        return [
            {
                **job_variables(t.job_id),
                OPEN_MPI.rank: str(rank),
                OPEN_MPI.size: str(t.world_size),
                OPEN_MPI.local_rank: str(local),
                OPEN_MPI.local_size: str(t.nproc_per_node),
                "OMPI_COMM_WORLD_NODE_RANK": str(local),  # Open MPI's meaning, not the node index
                **master,
            }
            for rank, _, local in t.ranks()
        ]
