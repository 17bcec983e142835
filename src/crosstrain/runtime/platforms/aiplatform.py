"""Legacy AI Platform Training: one process per node. Its PyTorch guide sets `MASTER_ADDR`, `MASTER_PORT`,
`WORLD_SIZE` (the node count) and `RANK` (the node index); `TF_CONFIG` names the task (`master`, or `chief` with
`useChiefInTfConfig`; `worker` i is node i + 1); `CLOUD_ML_JOB_ID` names the job. Its container guide shows the
same shape in a `CLUSTER_SPEC` with `master`/`worker` pools.

Sources: <https://cloud.google.com/ai-platform/training/docs/distributed-pytorch>;
<https://cloud.google.com/ai-platform/training/docs/distributed-training-details> (TF_CONFIG).
"""

from __future__ import annotations

import json
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


def legacy_cluster_spec(environ: Mapping[str, str]) -> bool:
    """AI Platform Training's `CLUSTER_SPEC` names `master`/`chief` and `worker` pools, Vertex's `workerpoolN`."""
    try:
        cluster = json.loads(environ["CLUSTER_SPEC"]).get("cluster")
    except (ValueError, AttributeError, KeyError):
        return False
    return isinstance(cluster, dict) and bool(cluster) and not any(str(k).startswith("workerpool") for k in cluster)


class AIPlatformTraining(Platform):
    """Legacy AI Platform Training: one process per node; `RANK` is the node index and `WORLD_SIZE` the node
    count (its PyTorch guide); `TF_CONFIG`'s task (`master`/`chief` → 0, `worker` i → i + 1) where they are
    not set."""

    name = "aiplatform"
    launch_modes = ("per-node",)

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return is_set(environ, "CLOUD_ML_JOB_ID") and (
            not is_set(environ, "CLUSTER_SPEC") or legacy_cluster_spec(environ)
        )

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        if is_set(environ, "WORLD_SIZE") or is_set(environ, "RANK"):
            nnodes, node_rank = r.integer("WORLD_SIZE", minimum=1), r.integer("RANK")
            r.check_rank("RANK", node_rank, "WORLD_SIZE", nnodes)
        elif is_set(environ, "CLUSTER_SPEC"):  # the container guide's form of TF_CONFIG: master/worker keys
            nnodes, node_rank = cls._from_tf_config(r, "CLUSTER_SPEC")
        elif is_set(environ, "TF_CONFIG"):
            nnodes, node_rank = cls._from_tf_config(r, "TF_CONFIG")
        else:
            nnodes, node_rank = 1, 0
        addr = r.text("MASTER_ADDR", None if nnodes > 1 else LOCALHOST)
        return ClusterEnv(
            cls.name, nnodes, node_rank, None, addr, r.port("MASTER_PORT", DEFAULT_MASTER_PORT), variables=environ
        )

    @staticmethod
    def _from_tf_config(r: Reader, variable: str) -> tuple[int, int]:
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

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """One process per node: the master, then the workers (the PyTorch guide's variables, always set)."""
        t = topology
        cluster = {"master": [t.endpoint(0)], "worker": [t.endpoint(node) for node in range(1, t.nnodes)]}
        envs = []
        for node in range(t.nnodes):
            task = {"type": "master", "index": 0} if node == 0 else {"type": "worker", "index": node - 1}
            envs.append(
                {
                    "MASTER_ADDR": t.master_addr,
                    "MASTER_PORT": str(t.master_port),
                    "WORLD_SIZE": str(t.nnodes),
                    "RANK": str(node),
                    "TF_CONFIG": json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}),
                    "CLOUD_ML_JOB_ID": t.job_id,
                }
            )
        return envs
