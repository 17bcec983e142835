"""No distributed variables at all: one process, rank 0 of 1 (a bare container, a notebook). On a machine with
several GPUs, crosstrain's launcher may still start one process per GPU."""

from __future__ import annotations

from collections.abc import Mapping

from crosstrain.runtime.platforms.base import (
    DEFAULT_MASTER_PORT,
    LOCALHOST,
    OVERRIDE_VARIABLE,
    ClusterEnv,
    Platform,
    Reader,
    Topology,
    is_set,
)


class SingleProcess(Platform):
    """Nothing distributed is set: one process, rank 0 of 1 (the launcher may still start one per GPU)."""

    name = "single"
    launch_modes = ("per-node",)
    machine_level = True

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return True

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        world_size = r.integer("WORLD_SIZE", 1, minimum=1)
        if world_size > 1:
            missing = [n for n in ("RANK", "MASTER_ADDR") if not is_set(environ, n)]
            raise r.error(
                missing[0] if missing else "WORLD_SIZE",
                f"is not set, but WORLD_SIZE is {world_size}: no platform's variables are complete",
                f"set RANK, MASTER_ADDR and MASTER_PORT (plain env://), or {OVERRIDE_VARIABLE}",
            )
        port = r.port("MASTER_PORT", DEFAULT_MASTER_PORT)
        return ClusterEnv(cls.name, 1, 0, 1, LOCALHOST, port, 0, 0, 1, variables=environ)

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """One machine, no variables: only a one-node topology is expressible."""
        if topology.nnodes != 1:
            raise ValueError(f"a single process has no way to join {topology.nnodes} nodes")
        return [{}]
