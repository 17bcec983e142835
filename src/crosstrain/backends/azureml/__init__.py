"""`azureml`: Azure Machine Learning (v2) command jobs, with PyTorch, MPI or TensorFlow distribution.

Render builds the calls submit makes: a GET of the job by its name (the render-time identity), then the ARM
calls that `MLClient.jobs.create_or_update` makes for the same job (azure-ai-ml 1.35.2): an anonymous
environment registration when the job names an image, and the job PUT, which records the request's
fingerprint in the job's `properties`. The job PUT is create-OR-UPDATE, so submit never sends it blind: the GET
comes first, and a job found under the name is adopted if its fingerprint is this request's and refused
(`IdentityConflict`) if not; only a 404 leads to the PUT. Submit sends exactly those calls through the
MLClient's own authenticated ARM pipeline (via `crosstrain.adaptors.azure`, which maps azure-core's errors);
status, cancel and logs use the public `MLClient.jobs` operations.

Azure runs one image, one command and one VM size on every node; `instance_count` is the number of nodes and
`process_count_per_instance` is per node (the SDK v1 `PyTorchConfiguration.process_count` was the total; the
`distributed_job_config` setting accepts the v1 forms and converts them).

The ARM token goes to management.azure.com only: a handle or a request from a file is checked, before any
credential is asked for a token, for that host and for the subscription, resource group and workspace this
machine configures (where it configures them).

The package: `settings` (what a target is configured with), `plan` (what a job means here, or why it cannot
run), `wire` (ARM paths, code assets, data bindings), `backend` (render, send, follow), `logs`, `cli_yaml`
(`--format azureml-yaml`) and `emulate` (this platform's nodes as local processes, for `--emulate azureml`).
"""

from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.backends.azureml.settings import (
    AzureMLSettings,
    MpiConfiguration,
    PyTorchConfiguration,
    TensorflowConfiguration,
)

__all__ = [
    "AzureMLBackend",
    "AzureMLSettings",
    "MpiConfiguration",
    "PyTorchConfiguration",
    "TensorflowConfiguration",
]
