"""Databricks AI Runtime (serverless GPU): one process per node, the deployment's command script, with the
node's place in `NUM_NODES`, `NODE_RANK`, `MASTER_ADDR` and `MASTER_PORT`, its GPUs in `LOCAL_WORLD_SIZE`, and
the unpacked code-source folder in `CODE_SOURCE_PATH`; no `RANK`, `WORLD_SIZE` or `LOCAL_RANK` (torchrun, or
crosstrain's launcher, sets those for the processes it starts).

No API reference documents these variables. Sources: the AI Runtime cookbook's multi-node workloads, which pass
them to `torchrun --nnodes/--node_rank/--master_addr/--master_port/--nproc_per_node` (github.com/
databricks-solutions/ai-runtime-cookbook, `post-training/sft-llama-3.1-8b-fsdp-multinode/workload.yaml`), and
https://docs.databricks.com/aws/en/machine-learning/ai-runtime/cli/yaml-config (`cd $CODE_SOURCE_PATH`).
"""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.base import (
    DEFAULT_MASTER_PORT,
    LOCALHOST,
    ClusterEnv,
    Platform,
    Reader,
    Topology,
    is_set,
)


class DatabricksAIR(Platform):
    """AI Runtime: every node runs the same script once; `NODE_RANK` of `NUM_NODES` says which node this is."""

    name = "databricks-air"
    launch_modes = ("per-node",)

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """`NUM_NODES` and `NODE_RANK` without a process `RANK` (torchrun's children, found first, have one)."""
        return is_set(environ, "NUM_NODES", "NODE_RANK") and not is_set(environ, "RANK")

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        nnodes, node_rank = r.integer("NUM_NODES", minimum=1), r.integer("NODE_RANK")
        r.check_rank("NODE_RANK", node_rank, "NUM_NODES", nnodes)
        addr = r.text("MASTER_ADDR", LOCALHOST if nnodes == 1 else None)
        port = r.port("MASTER_PORT", DEFAULT_MASTER_PORT)
        per_node = r.optional_integer("LOCAL_WORLD_SIZE", minimum=1)
        return ClusterEnv(cls.name, nnodes, node_rank, per_node, addr, port, variables=environ)

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """One process per node, each with the node's place and the rendezvous (the GPUs per node, which the
        topology does not carry, are the emulation's to add)."""
        t = topology
        return [
            {
                "NUM_NODES": str(t.nnodes),
                "NODE_RANK": str(node),
                "MASTER_ADDR": t.master_addr,
                "MASTER_PORT": str(t.master_port),
            }
            for node in range(t.nnodes)
        ]
