"""Vertex AI CustomJobs: one process per replica. `CLUSTER_SPEC` (every job) says which worker pool and index
this replica is; pool 0 is node 0 and pool 1's replica i is node i + 1; pool 2 (reduction server or parameter
servers) and pool 3 (evaluators) are not training nodes. Multi-replica jobs also get node-level `RANK` and
`WORLD_SIZE` (undocumented: `RANK` is a *node* index, the trap of Lightning-AI/pytorch-lightning#13374) and
`MASTER_ADDR`/`MASTER_PORT`; no `LOCAL_RANK`, `NODE_RANK` or `GROUP_RANK`.

Sources: <https://cloud.google.com/vertex-ai/docs/training/distributed-training#cluster-variables> (CLUSTER_SPEC);
<https://cloud.google.com/vertex-ai/docs/training/code-requirements#environment-variables> (`AIP_*_DIR`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from crosstrain.runtime.platforms.aiplatform import legacy_cluster_spec
from crosstrain.runtime.platforms.base import (
    DEFAULT_MASTER_PORT,
    LOCALHOST,
    ClusterEnv,
    Platform,
    Reader,
    Topology,
    is_set,
)

log = logging.getLogger("crosstrain.runtime")

TRAINING_POOLS = ("workerpool0", "workerpool1")


def output_variables(output_uri: str) -> dict[str, str]:
    """Where Vertex tells the code to write, under the job's `baseOutputDirectory`."""
    base = output_uri.rstrip("/")
    return {
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
    }


class VertexAI(Platform):
    """Vertex AI CustomJob: one process per replica. `CLUSTER_SPEC` says which pool and index this replica
    is; pool 0 is node 0 and pool 1's replica i is node i + 1. Pool 2 (reduction server or parameter
    servers) and pool 3 (evaluators) are not training nodes. `RANK`/`WORLD_SIZE`, where set, count nodes and
    are only a cross-check."""

    name = "vertex"
    launch_modes = ("per-node",)
    TRAINING_POOLS = TRAINING_POOLS

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """A `CLUSTER_SPEC` with worker pools (an unreadable one too, so that `read` says what is wrong);
        AI Platform's master/worker form belongs to `AIPlatformTraining`."""
        return is_set(environ, "CLUSTER_SPEC") and not legacy_cluster_spec(environ)

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> ClusterEnv:
        r = Reader(cls.name, environ)
        spec = r.json_object("CLUSTER_SPEC")
        cluster, task = spec.get("cluster"), spec.get("task")
        if not isinstance(cluster, dict) or not isinstance(task, dict):
            raise r.error("CLUSTER_SPEC", "has no `cluster` and `task` objects")
        pools = {}
        for pool in TRAINING_POOLS:
            hosts = cluster.get(pool, [])
            if not isinstance(hosts, list) or not all(isinstance(h, str) and h for h in hosts):
                raise r.error("CLUSTER_SPEC", f"cluster.{pool} is not a list of host:port strings")
            pools[pool] = hosts
        if len(pools["workerpool0"]) != 1:
            raise r.error("CLUSTER_SPEC", f"cluster.workerpool0 has {len(pools['workerpool0'])} replicas, not 1")
        kind, index = task.get("type"), task.get("index")
        if kind not in TRAINING_POOLS:
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
    def _cross_check(r: Reader, nnodes: int, node_rank: int) -> None:
        """Vertex's node-level `WORLD_SIZE`/`RANK` are undocumented (whether reducer or evaluator replicas count
        in them is unknown), so a disagreement with `CLUSTER_SPEC`, the authority, is only logged."""
        for name, expected in (("WORLD_SIZE", nnodes), ("RANK", node_rank)):
            seen = r.optional_integer(name)
            if seen is not None and seen != expected:
                log.warning("vertex: %s is %s, but CLUSTER_SPEC says %s; following CLUSTER_SPEC", name, seen, expected)

    @classmethod
    def emulate(cls, topology: Topology) -> list[dict[str, str]]:
        """One replica per node: the primary in pool 0, the others in pool 1 (no reducers or evaluators)."""
        t = topology
        cluster = {"workerpool0": [t.endpoint(0)]}
        if t.nnodes > 1:
            cluster["workerpool1"] = [t.endpoint(node) for node in range(1, t.nnodes)]
        envs = []
        for node in range(t.nnodes):
            pool, index = ("workerpool0", 0) if node == 0 else ("workerpool1", node - 1)
            task = {"type": pool, "index": index, "trial": ""}
            env = {
                "CLUSTER_SPEC": json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}),
                "CLOUD_ML_JOB_ID": t.job_id,
            }
            if t.nnodes > 1 or t.always_rendezvous:
                env.update({"MASTER_ADDR": t.master_addr, "MASTER_PORT": str(t.master_port)})
            if t.nnodes > 1:
                env.update({"RANK": str(node), "WORLD_SIZE": str(t.nnodes)})
            envs.append(env)
        return envs
