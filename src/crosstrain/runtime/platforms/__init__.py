"""One module per platform, each owning both directions of that platform's environment: `detect`/`read` (on a
node: its variables -> `ClusterEnv`) and `emulate` (a `Topology` -> the variables the platform sets for each
process it starts, used by the local backend), with the platform's documented variables and their sources.
`crosstrain.runtime.env` orders them for detection. Standard library only: these files travel with shipped code.
"""

from __future__ import annotations

from crosstrain.runtime.platforms.aiplatform import AIPlatformTraining
from crosstrain.runtime.platforms.azureml import AzureMLPyTorch
from crosstrain.runtime.platforms.azureml_mpi import AzureMLMPI
from crosstrain.runtime.platforms.base import ClusterEnv, ClusterEnvError, Platform, Topology
from crosstrain.runtime.platforms.databricks import Databricks
from crosstrain.runtime.platforms.databricks_air import DatabricksAIR
from crosstrain.runtime.platforms.plain import PlainEnv
from crosstrain.runtime.platforms.single import SingleProcess
from crosstrain.runtime.platforms.torchelastic import TorchElastic
from crosstrain.runtime.platforms.vertex import VertexAI

__all__ = [
    "AIPlatformTraining",
    "AzureMLMPI",
    "AzureMLPyTorch",
    "ClusterEnv",
    "ClusterEnvError",
    "Databricks",
    "DatabricksAIR",
    "PlainEnv",
    "Platform",
    "SingleProcess",
    "Topology",
    "TorchElastic",
    "VertexAI",
]
