"""Databricks: `TorchDistributor(num_processes, local_mode, use_gpu).run(file, *args)` starts the ranks through
torchrun, so its training processes are torchelastic's children and are read as such.

Distributed mode: each Spark barrier task is a one-process torchrun "node" (`--nnodes=num_processes
--node_rank=<task> --nproc_per_node=1 --rdzv_id=0`), after `set_torch_config` put `MASTER_ADDR`, `MASTER_PORT`,
`WORLD_SIZE` and `NODE_RANK` = `RANK` = the task's partition id in the task's environment: so `GROUP_RANK` and
`NODE_RANK` count Spark tasks, not machines, and `LOCAL_RANK` is 0. Local mode: one `torchrun --standalone
--nnodes=1 --nproc_per_node=num_processes` on the driver. Source: pyspark `python/pyspark/ml/torch/distributor.py`
(`set_torch_config`, `_create_torchrun_command`); <https://docs.databricks.com/en/machine-learning/train-model/distributed-training/spark-pytorch-distributor.html>.
"""

from __future__ import annotations

from crosstrain.runtime.platforms.base import Topology
from crosstrain.runtime.platforms.torchelastic import TorchElastic


class Databricks(TorchElastic):
    """TorchDistributor's training processes: detected and read as torchelastic (which they are)."""

    launch_modes = ("per-process",)

    @classmethod
    def emulate(cls, topology: Topology, run_id: str = "0") -> list[dict[str, str]]:
        """The job's `nnodes x nproc_per_node` ranks as TorchDistributor runs them: on one node, local mode;
        on several, distributed mode with one Spark task (and one torchrun node) per rank."""
        if topology.nnodes == 1:
            return TorchElastic.emulate(topology, run_id="none")
        tasks = Topology(topology.world_size, 1, topology.master_addr, topology.master_port, topology.job_id)
        spark_task = {"MASTER_ADDR": tasks.master_addr, "MASTER_PORT": str(tasks.master_port)}
        return [
            {**spark_task, "NODE_RANK": worker["RANK"], **worker}
            for worker in TorchElastic.emulate(tasks, run_id=run_id)
        ]
