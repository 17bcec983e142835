"""Who started this process, and what the platform's variables mean here.

Several platforms export `RANK` and `WORLD_SIZE` with *node* meaning (Vertex AI, AI Platform Training, Azure ML
with one process per node), while `torch.distributed`'s `env://` wants *process* values. So `detect()` first
decides which platform launched this process (the first class in `PLATFORMS` whose `detect()` is true, or the
one `CROSSTRAIN_PLATFORM` names) and only then reads its variables. Each platform's rules live in its own module
under `crosstrain.runtime.platforms`; this module orders them. Standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from crosstrain.runtime.platforms.aiplatform import AIPlatformTraining
from crosstrain.runtime.platforms.azureml import AZURE_MASTER_PORT, AzureMLPyTorch
from crosstrain.runtime.platforms.azureml_mpi import AzureMLMPI
from crosstrain.runtime.platforms.base import (
    DEFAULT_MASTER_PORT,
    LOCALHOST,
    OVERRIDE_VARIABLE,
    ClusterEnv,
    ClusterEnvError,
    Platform,
    Topology,
)
from crosstrain.runtime.platforms.databricks_air import DatabricksAIR
from crosstrain.runtime.platforms.plain import PlainEnv
from crosstrain.runtime.platforms.single import SingleProcess
from crosstrain.runtime.platforms.torchelastic import TorchElastic
from crosstrain.runtime.platforms.vertex import VertexAI

__all__ = [
    "AZURE_MASTER_PORT",
    "DEFAULT_MASTER_PORT",
    "LOCALHOST",
    "OVERRIDE_VARIABLE",
    "PLATFORMS",
    "AIPlatformTraining",
    "AzureMLMPI",
    "AzureMLPyTorch",
    "ClusterEnv",
    "ClusterEnvError",
    "DatabricksAIR",
    "PlainEnv",
    "Platform",
    "SingleProcess",
    "Topology",
    "TorchElastic",
    "VertexAI",
    "detect",
]

# The documented detection order: the most specific launcher first. torchelastic comes first because torchrun
# may run inside any of the others (Databricks, our own launcher on Vertex); `env` and `single` come last.
PLATFORMS: tuple[type[Platform], ...] = (
    TorchElastic,
    AzureMLPyTorch,
    AzureMLMPI,
    VertexAI,
    AIPlatformTraining,
    DatabricksAIR,
    PlainEnv,
    SingleProcess,
)


def detect(environ: Mapping[str, str] | None = None) -> ClusterEnv:
    """The cluster this process runs in: `CROSSTRAIN_PLATFORM` if set, else the first platform that matches."""
    environ = dict(os.environ if environ is None else environ)
    forced = environ.get(OVERRIDE_VARIABLE, "").strip()
    if forced:
        by_name = {p.name: p for p in PLATFORMS}
        platform = by_name.get(forced)
        if platform is None:
            raise ClusterEnvError(
                forced, OVERRIDE_VARIABLE, "names no platform", f"use one of: {', '.join(sorted(by_name))}"
            )
        return platform.read(environ)  # forced: read its variables even where its marker is missing
    return next(p for p in PLATFORMS if p.detect(environ)).read(environ)
