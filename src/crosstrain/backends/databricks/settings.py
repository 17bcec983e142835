"""What a Databricks target is configured with: the workspace, the cluster, and the GPU ML runtimes."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, TypeVar
from urllib.parse import urlparse

from pydantic import Field

from crosstrain import packaging, uploads
from crosstrain.backends._databricks import CANCELED, STATE_MAP, SUCCESS, WorkspaceSettings
from crosstrain.environments import Runtime, Runtimes
from crosstrain.settings import setting
from crosstrain.spec_fields import no_items

if TYPE_CHECKING:
    pass


T = TypeVar("T")

Cloud = Literal["aws", "azure", "gcp"]

# STATE_MAP, SUCCESS and CANCELED: the Jobs states, shared (`crosstrain.backends._databricks`).
#: The cluster tag that carries the request's fingerprint (next to `crosstrain_job`, the identity).
FINGERPRINT_TAG = "crosstrain_fingerprint"

#: Where a cluster without a volume delivers its logs (`cluster_log_conf.dbfs`), one folder per identity.
DBFS_LOG_ROOT = "dbfs:/crosstrain/logs"

#: A small GPU driver per cloud, for when the job's GPU kind has no one-GPU machine (the driver does not train).
_SMALL_GPU = {"aws": "T4", "azure": "T4", "gcp": "L4"}
_HOST_CLOUDS = (
    (".azuredatabricks.net", "azure"),
    (".gcp.databricks.com", "gcp"),
    (".cloud.databricks.com", "aws"),
)
#: Paths every node of a cluster sees; a training file there is not uploaded.
_CLUSTER_PATHS = ("/Workspace/", "/Volumes/", "/dbfs/")
_PYTHON = re.compile(r"python(3(\.\d+)?)?")
_NOTEBOOK_HEADER = b"# Databricks notebook source"
#: `POST /api/2.0/workspace/import` takes at most 10 MB of base64 `content`; more fails with
#: MAX_NOTEBOOK_SIZE_EXCEEDED (https://docs.databricks.com/api/workspace/workspace/import, and the SDK's
#: `ImportResponse.content` docstring). Read as 10,000,000 characters, the smaller meaning of "MB".
IMPORT_LIMIT = uploads.SizeLimit.base64(
    10_000_000,
    "the Databricks workspace import takes at most 10 MB of base64 content (MAX_NOTEBOOK_SIZE_EXCEEDED)",
    "put the file on a volume and name it in `command` (python /Volumes/<catalog>/<schema>/<volume>/train.py), "
    "or make it smaller",
)
#: The fix for a code archive over the workspace import's limit: a volume takes up to 5 GiB in one PUT.
VOLUME_FIX = (
    "use a Unity Catalog volume: targets.databricks.volume: /Volumes/<catalog>/<schema>/<volume> (or leave "
    "data and checkpoints out of the folder with .crosstrainignore)"
)
#: Without a volume, a code folder over this is refused before it is compressed (its archive, which must
#: fit IMPORT_LIMIT, is checked exactly once made).
WORKSPACE_CODE_LIMITS = packaging.Limits(
    max_bytes=100 * 1024**2,
    description="the Databricks workspace import takes at most 10 MB of base64 content, so crosstrain does not "
    "compress more than 100 MiB for it",
    fix=VOLUME_FIX,
)
#: The cluster runtime without `environment:` or `spark_version`: the newest LTS GPU ML runtime.
DEFAULT_SPARK_VERSION = "17.3.x-gpu-ml-scala2.13"
_NOTES = "https://docs.databricks.com/aws/en/release-notes/runtime"
#: `environment: pytorch[:X.Y]` -> a Databricks Runtime ML (GPU; CPU flavour for completeness), newest first.
#: The runtime names are Databricks' GPU ML runtimes (https://docs.databricks.com/aws/en/compute/gpu, verified
#: against the docs). The torch version each one ships is from its "Python libraries on GPU clusters" table
#: (the source URL); no copy of those tables was in reach when this was written, so every torch version
#: below is UNVERIFIED: check the release note before relying on `pytorch:X.Y`.
RUNTIMES = Runtimes(
    "Databricks",
    (
        Runtime("2.7", "17.3.x-gpu-ml-scala2.13", "17.3.x-cpu-ml-scala2.13", f"{_NOTES}/17.3lts-ml"),  # unverified
        Runtime("2.6", "16.4.x-gpu-ml-scala2.12", "16.4.x-cpu-ml-scala2.12", f"{_NOTES}/16.4lts-ml"),  # unverified
        Runtime("2.3", "15.4.x-gpu-ml-scala2.12", "15.4.x-cpu-ml-scala2.12", f"{_NOTES}/15.4lts-ml"),  # unverified
        Runtime("2.1", "14.3.x-gpu-ml-scala2.12", "14.3.x-cpu-ml-scala2.12", f"{_NOTES}/14.3lts-ml"),  # unverified
    ),
    "targets.databricks.spark_version",
)


class DatabricksSettings(WorkspaceSettings):
    # host, profile, workspace_dir, volume and their checks: the shared `WorkspaceSettings`.
    cloud: Cloud | None = setting(
        None,
        description="The workspace's cloud, which picks node types from the catalog; read from the host "
        "(*.cloud.databricks.com, *.azuredatabricks.net, *.gcp.databricks.com) when unset.",
    )
    spark_version: str | None = setting(
        None,
        description="The cluster's runtime, named directly (e.g. 16.4.x-gpu-ml-scala2.12). Default: the job's "
        f"`environment` from crosstrain's table, else {DEFAULT_SPARK_VERSION} (17.3 LTS ML). With an image the "
        "standard runtime of the same version is used, since Container Services does not run ML runtimes.",
    )
    driver_node_type_id: str | None = setting(
        None,
        description="Driver node type of multi-node clusters (it coordinates, it does not train; it must have "
        "a GPU). Default: a one-GPU machine of the job's GPU kind, else a small T4 (AWS, Azure) or L4 (GCP).",
    )
    libraries: list[str] = Field(
        default_factory=no_items,
        description="More PyPI requirements or wheel paths the training code needs on the cluster.",
    )
    workspace_dir: str = setting(
        "/Workspace/Shared/crosstrain",
        description="Workspace folder that submit uploads to: the code archive and crosstrain's launcher under "
        "code/<sha of the bundle>/, a lone local training file under <identity>/<sha of the file>/.",
    )

    def resolved_cloud(self) -> Cloud | None:
        if self.cloud:
            return self.cloud
        host = urlparse(self.host).hostname or ""
        for suffix, cloud in _HOST_CLOUDS:
            if host.endswith(suffix):
                return cloud  # type: ignore[return-value]
        return None


__all__ = ["CANCELED", "STATE_MAP", "SUCCESS", "DatabricksSettings"]
