"""`databricks`: one-time runs (`POST /api/2.2/jobs/runs/submit`) that call TorchDistributor on a GPU cluster.

The run has one `spark_python_task` on a `new_cluster`. Its file is crosstrain's launcher
(`crosstrain/databricks_task.py`, uploaded as `crosstrain_task.py`), which unpacks the job's code bundle, calls
`TorchDistributor(num_processes, local_mode, use_gpu).run(...)` on the training file or module and fails the
task when any rank failed, which TorchDistributor alone never does. Nothing comes from PyPI but the job's
`requirements` (task `libraries`); `environment: pytorch[:X.Y]` picks a Databricks Runtime ML (`RUNTIMES`).

Mapping (sources: https://docs.databricks.com/aws/en/machine-learning/train-model/distributed-training/spark-pytorch-distributor
and https://docs.databricks.com/api/workspace/jobs/submit):

* every training node (primary + workers) is a Spark executor: `num_workers = nodes`, one GPU per Spark task
  (`spark.task.resource.gpu.amount = 1`; more hangs the rendezvous on pyspark <= 4.1) and
  `num_processes = nodes x GPUs per node`. The driver only coordinates, on a small GPU type (the driver of a
  GPU cluster must be a GPU type too). A one-node job runs on a single-node cluster in local mode.
* the workspace's cloud picks the catalog rows (`databricks-aws`, `-azure`, `-gcp`); it is read from the host
  name unless set.
* a secret `env: {NAME: {secret: scope/key}}` becomes `{{secrets/scope/key}}` in `spark_env_vars`, which the
  cluster resolves at start (the cluster owner needs READ on the scope); other stores are refused.
* an image becomes `docker_image` (Databricks Container Services). Container Services does not run ML
  runtimes, so the runtime becomes the standard one of the same version, and the image must carry torch,
  CUDA and NCCL.
* every run uploads a bundle (`crosstrain.packaging`: the `code:` folder and crosstrain's runtime, or the
  runtime alone) as one archive to `<workspace_dir>/code/<sha>/` (workspace import, at most 10 MB of base64)
  or `<volume>/code/<sha>/` (Files API), and the launcher beside it in the workspace; each upload is checked
  at its content-addressed path first and skipped when there, so a re-submit uploads nothing. The launcher
  ships `train_on_rank` to the Spark workers by value: they unpack the archive themselves, from the FUSE
  path every node sees (../docs/databricks.md, "How the code reaches the cluster").
* without `code:`, a training file on this machine is uploaded on its own (`workspace/mkdirs` +
  `workspace/import`, in the rendered request) under `<workspace_dir>/<identity>/<sha of the file>/`, so an
  upload never overwrites the file of another request's run; a path already on the cluster is used as is.
  Only a regular file under the job file's folder is read, never through a symlink that leaves it, and at
  most the import's size limit (`crosstrain.uploads`).
* the identity is the `idempotency_token` (Databricks starts exactly one run per token and returns that run
  for a repeated one), and the request's fingerprint is the cluster tag `crosstrain_fingerprint`: after
  `runs/submit`, submit reads the run back and refuses (`IdentityConflict`) a run made from another request.
* a handle or a request from a file is sent only to the workspace this machine configures (`--set host`,
  `DATABRICKS_HOST`, else the host of the `~/.databrickscfg` profile), checked before any credential is loaded.
"""

from crosstrain.backends.databricks.backend import DatabricksBackend
from crosstrain.backends.databricks.settings import DatabricksSettings

__all__ = ["DatabricksBackend", "DatabricksSettings"]
