"""`databricks-air`: Databricks AI Runtime (serverless GPU) runs: a one-time run (`POST /api/2.2/jobs/runs/submit`)
whose one task is an `ai_runtime_task` (databricks-sdk `AiRuntimeTask`, `DeploymentSpec`, `ComputeSpec`).

Mapping (sources: databricks-sdk `databricks/sdk/service/jobs.py`, https://github.com/databricks/databricks-sdk-py;
https://docs.databricks.com/aws/en/machine-learning/ai-runtime/cli/yaml-config):

* the job's one pool is the one deployment (the service runs the same command on every node): its machine is an
  accelerator type, `GPU_1xA10`, `GPU_1xH100`, `GPU_8xH100` or `GPU_8xB300` (`A10G:1`, `H100:1`, `H100:8`,
  `B300:8`), and `accelerator_count` is the total across nodes (2 nodes of `H100:8` -> `GPU_8xH100`, 16);
* the code bundle (the `code:` folder and crosstrain's runtime) is uploaded once per content to workspace files
  or a volume, as for the `databricks` target (`crosstrain.backends._databricks`); a command script crosstrain
  writes (the job's variables exported, the archive unpacked, crosstrain's launcher started in the code folder)
  is uploaded under the run's identity and fingerprint and is the deployment's `command_path`;
* `requirements` are the run's environment's `dependencies` (`environment_version` from the settings); an image
  is `docker_image_url`, and then the bootstrap installs the requirements;
* the MLflow experiment is the job name (or `experiment`), the MLflow run the identity; timeout and retries are
  the run's and the task's; the identity is the `idempotency_token`.
"""

from crosstrain.backends.databricks_air.backend import DatabricksAIRBackend
from crosstrain.backends.databricks_air.settings import DatabricksAIRSettings

__all__ = ["DatabricksAIRBackend", "DatabricksAIRSettings"]
