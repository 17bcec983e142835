"""torchrun / torchelastic: the agent on each node starts the ranks and gives each its process-level variables.

Sources: <https://pytorch.org/docs/stable/elastic/run.html#environment-variables> (the documented list) and
`torch/distributed/elastic/agent/server/local_elastic_agent.py` (what the agent also sets: `ROLE_NAME`,
`GROUP_WORLD_SIZE`, `TORCHELASTIC_USE_AGENT_STORE`). torchrun sets no `NODE_RANK`: its node rank is `GROUP_RANK`.
"""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.base import DEFAULT_MASTER_PORT, ClusterEnv, Platform, Reader, Topology, is_set

RUN_ID_VARIABLE = "TORCHELASTIC_RUN_ID"


class TorchElastic(Platform):
    """torchrun / torchelastic: every variable is process-level. Covers Databricks TorchDistributor (one
    torchrun "node" per Spark task) and the children of crosstrain's own launcher."""

    name = "torchelastic"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return is_set(environ, RUN_ID_VARIABLE)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
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

    @classmethod
    def emulate(cls, topology: Topology, run_id: str = "none") -> list[dict[str, str]]:
        """What `torchrun --nnodes N --node_rank n --nproc_per_node M --master_addr A --master_port P` (a static
        rendezvous, no restarts) gives each worker; `run_id` is its `--rdzv_id` ("none" by default)."""
        t = topology
        return [
            {
                "LOCAL_RANK": str(local),
                "RANK": str(rank),
                "GROUP_RANK": str(node),
                "ROLE_RANK": str(rank),
                "ROLE_NAME": "default",
                "LOCAL_WORLD_SIZE": str(t.nproc_per_node),
                "WORLD_SIZE": str(t.world_size),
                "GROUP_WORLD_SIZE": str(t.nnodes),
                "ROLE_WORLD_SIZE": str(t.world_size),
                "MASTER_ADDR": t.master_addr,
                "MASTER_PORT": str(t.master_port),
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
                "TORCHELASTIC_RUN_ID": run_id,
                "TORCHELASTIC_USE_AGENT_STORE": "True",
            }
            for rank, node, local in t.ranks()
        ]
