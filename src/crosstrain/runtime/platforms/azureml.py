"""Azure ML command jobs with the `pytorch` distribution: Azure starts `process_count_per_instance` processes on
each of `instance_count` nodes and sets `MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `NODE_RANK` per node and
`RANK`, `LOCAL_RANK` per process. `LOCAL_WORLD_SIZE` is not documented. With one process per node (crosstrain's
per-node mode) `RANK`/`WORLD_SIZE` are the node rank and node count in disguise.

Sources: <https://learn.microsoft.com/azure/machine-learning/how-to-train-distributed-gpu> (the variables; the v1
guide gives port 6105); the undocumented extras read where present (`AZUREML_NODE_COUNT`, `AZ_BATCH_HOST_LIST`)
are observed on the platform, never relied on.
"""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.base import ClusterEnv, Platform, Reader, Topology, is_set

AZURE_MASTER_PORT = 6105  # what Azure ML sets, per its v1 docs
RUN_ID_VARIABLE = "AZUREML_RUN_ID"


def job_variables(job_id: str) -> dict[str, str]:
    """What every Azure ML process gets whatever the distribution: the run's identity."""
    return {RUN_ID_VARIABLE: job_id}


class AzureMLPyTorch(Platform):
    """Azure ML `pytorch` distribution: `MASTER_*`, `WORLD_SIZE`, `NODE_RANK` per node; `RANK`, `LOCAL_RANK`
    per process. With one process per node these are node rank and node count in disguise."""

    name = "azureml-pytorch"
    launch_modes = ("per-process", "per-node")
    machine_level = True

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        azure = any(k.startswith(("AZUREML_", "AZ_BATCH")) for k in environ)
        return azure and is_set(environ, "NODE_RANK", "LOCAL_RANK")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
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
    def _processes_per_node(r: Reader, world_size: int, rank: int, node_rank: int, local_rank: int) -> int | None:
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

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """The documented variables only (the undocumented extras would hide node 0's ambiguity, which the
        launcher's `--nnodes` settles on the platform)."""
        t = topology
        return [
            {
                **job_variables(t.job_id),
                "MASTER_ADDR": t.master_addr,
                "MASTER_PORT": str(t.master_port),
                "WORLD_SIZE": str(t.world_size),
                "NODE_RANK": str(node),
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
            }
            for rank, node, local in t.ranks()
        ]
