"""Plain `env://`: whoever started the processes set `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` on each
(and, where they know them, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `NODE_RANK`): PyTorch's `env://` initialization.

Source: <https://pytorch.org/docs/stable/distributed.html#environment-variable-initialization>.
"""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.base import DEFAULT_MASTER_PORT, ClusterEnv, Platform, Reader, Topology, is_set


class PlainEnv(Platform):
    """Plain `env://`: someone set `RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` per process.
    Without `LOCAL_RANK` each process is taken to be alone on its machine."""

    name = "env"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return is_set(environ, "RANK", "WORLD_SIZE", "MASTER_ADDR")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        world_size, rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
        r.check_rank("RANK", rank, "WORLD_SIZE", world_size)
        addr, port = r.text("MASTER_ADDR"), r.port("MASTER_PORT", DEFAULT_MASTER_PORT)
        if not is_set(environ, "LOCAL_RANK"):
            return ClusterEnv(cls.name, world_size, rank, 1, addr, port, rank, 0, world_size, variables=environ)
        local_rank = r.integer("LOCAL_RANK")
        per_node = r.optional_integer("LOCAL_WORLD_SIZE", minimum=1)
        nnodes = node_rank = None
        if per_node is not None:
            r.check_rank("LOCAL_RANK", local_rank, "LOCAL_WORLD_SIZE", per_node)
            if world_size % per_node:
                raise r.error("WORLD_SIZE", f"is {world_size}, not a multiple of LOCAL_WORLD_SIZE {per_node}")
            nnodes, node_rank = world_size // per_node, rank // per_node
        if is_set(environ, "NODE_RANK"):
            node_rank = r.integer("NODE_RANK")
        return ClusterEnv(
            cls.name, nnodes, node_rank, per_node, addr, port, rank, local_rank, world_size, variables=environ
        )

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """Every `env://` variable, as a hand-written launch script would set them."""
        t = topology
        return [
            {
                "MASTER_ADDR": t.master_addr,
                "MASTER_PORT": str(t.master_port),
                "RANK": str(rank),
                "WORLD_SIZE": str(t.world_size),
                "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": str(t.nproc_per_node),
                "NODE_RANK": str(node),
            }
            for rank, node, local in t.ranks()
        ]
