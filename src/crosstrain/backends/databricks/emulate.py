"""Databricks on this machine (`--emulate databricks`): the driver of the rendered run, whose TorchDistributor
runs the ranks as Spark tasks on a local SparkSession."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
from typing import TYPE_CHECKING

from crosstrain.backends.emulation import LOOPBACK, RUN_DIR, Emulation, Node
from crosstrain.databricks_task import RANK_TAGS, DistributorCall
from crosstrain.errors import MissingDependency
from crosstrain.packaging import ARCHIVE_NAME, PACKAGE

if TYPE_CHECKING:
    from crosstrain.records import Request
    from crosstrain.spec import TrainingJob


def nodes(request: Request, job: TrainingJob, nproc: int) -> list[Node]:
    """The driver of the rendered run: with `code:`, the uploaded launcher (the staged bundle's
    `databricks_task.py`, the same bytes) started from the stage with `--code` naming the staged archive, as
    the cluster starts it; its Spark workers run `python` (the local target's), with no crosstrain installed
    unless that Python has it. Without `code:`, `python -m crosstrain.databricks_task` on the local file."""
    task = request.create.body["tasks"][0]
    call = DistributorCall.parse(task["spark_python_task"]["parameters"])
    target = call.target
    if request.code is None and any(
        c.url.endswith("/workspace/import") and isinstance(c.body["content"], str) for c in request.calls
    ):  # a lone file it uploaded: run it from here
        token = next(t for t in job.pools()[0].command or [] if t.endswith(".py"))
        target = str(job.base_dir / token)
    processes = nproc if call.local_mode else job.nodes * nproc
    # No GPUs in a local SparkSession: TorchDistributor runs the ranks on the CPU (gloo).
    call = dataclasses.replace(call, num_processes=processes, use_gpu=False, target=target, code="")
    env = {
        k: v
        for k, v in (task["new_cluster"].get("spark_env_vars") or {}).items()
        if not k.endswith("_SOCKET_IFNAME")  # the cloud's interface name; every node is on loopback here
    }
    slots = 1 if call.local_mode else processes
    spark_conf = "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false"
    env["PYSPARK_SUBMIT_ARGS"] = f"--master local[{slots}] {spark_conf} pyspark-shell"
    env["SPARK_LOCAL_IP"] = LOOPBACK
    env["PYSPARK_PYTHON"] = "python"  # the local target's `python`: first on PATH
    env[RANK_TAGS] = "1"  # every rank's lines say whose they are (the one driver relays them all)
    if request.code is not None:  # the working folder is the unpacked sdist; the archive lies beside it
        env["CROSSTRAIN_UNPACK_DIR"] = f"{RUN_DIR}/unpacked"
        code = dataclasses.replace(call, code=f"../{ARCHIVE_NAME}")
        argv = ["python", f"{PACKAGE}/crosstrain/databricks_task.py", *code.parameters()]
    else:
        argv = ["python", "-m", "crosstrain.databricks_task", *call.parameters()]
    return [Node("driver", 0, list(range(processes)), argv, env, relays="spark")]


def check_spark() -> None:
    if importlib.util.find_spec("pyspark") is None:
        raise MissingDependency("emulating Databricks needs a local Spark: pip install 'crosstrain[spark]'")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        raise MissingDependency("emulating Databricks starts a local SparkSession, which needs Java 17 (or JAVA_HOME)")


EMULATION = Emulation(
    variants={"databricks": {}},
    placeholder_settings={"host": "https://local-emulation.cloud.databricks.com"},
    nodes=nodes,
    sets_processes_per_node=False,
    gpus=False,
    requirements=check_spark,
)
