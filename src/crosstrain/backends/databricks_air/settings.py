"""What a Databricks AI Runtime target is configured with: the workspace, where uploads go, the run's
environment and MLflow experiment, and reserved capacity."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from crosstrain import packaging, uploads
from crosstrain.backends._databricks import WorkspaceSettings
from crosstrain.settings import setting

# The run's states are the Jobs states (`crosstrain.backends._databricks.STATE_MAP`): an AI Runtime task is one
# task of a one-time run, and PENDING is also "waiting for GPUs", said in its output's status_message.

#: The AI Runtime environment version the `databricks air` CLI sends by default ("4", from CLIENT-GPU-4).
DEFAULT_ENVIRONMENT_VERSION = "4"
#: `POST /api/2.0/workspace/import` takes at most 10 MB of base64 content (MAX_NOTEBOOK_SIZE_EXCEEDED;
#: https://docs.databricks.com/api/workspace/workspace/import).
IMPORT_LIMIT = uploads.SizeLimit.base64(
    10_000_000,
    "the Databricks workspace import takes at most 10 MB of base64 content (MAX_NOTEBOOK_SIZE_EXCEEDED)",
    "set targets.databricks-air.volume: /Volumes/<catalog>/<schema>/<volume>, or make the code folder smaller",
)
VOLUME_FIX = (
    "use a Unity Catalog volume: targets.databricks-air.volume: /Volumes/<catalog>/<schema>/<volume> (or leave "
    "data and checkpoints out of the folder with .crosstrainignore)"
)
#: Without a volume, a code folder over this is refused before it is compressed.
WORKSPACE_CODE_LIMITS = packaging.Limits(
    max_bytes=100 * 1024**2,
    description="the Databricks workspace import takes at most 10 MB of base64 content, so crosstrain does not "
    "compress more than 100 MiB for it",
    fix=VOLUME_FIX,
)

PriorityClass = Literal["BEST_EFFORT", "NORMAL", "CRITICAL"]


class DatabricksAIRSettings(WorkspaceSettings):
    # host, profile and volume and their checks: the shared `WorkspaceSettings`.
    workspace_dir: str = setting(
        "/Workspace/Shared/crosstrain",
        description="Workspace folder that submit uploads to: the code archive under code/<sha of the bundle>/, "
        "each run's command script under air/<identity>/<fingerprint>/.",
    )
    environment_version: str = setting(
        DEFAULT_ENVIRONMENT_VERSION,
        description="The AI Runtime environment version (`environments[].spec.environment_version`); the "
        "`databricks air` CLI's default is 4.",
    )
    experiment: str | None = setting(
        None, description="The MLflow experiment the run logs to (`ai_runtime_task.experiment`). Default: the job name."
    )
    experiment_directory: str | None = setting(
        None,
        description="Workspace folder the experiment is made in (`mlflow_experiment_directory`, under /Workspace): "
        "needed by a service principal without a home folder.",
    )
    provisioned_capacity_id: str | None = setting(
        None, description="A reserved-capacity id: the run is scheduled there instead of on-demand capacity."
    )
    priority_class: PriorityClass | None = setting(
        None, description="The run's priority on reserved capacity (only with provisioned_capacity_id)."
    )

    @field_validator("experiment_directory")
    @classmethod
    def _experiment_directory(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/Workspace"):
            raise ValueError(f"{value!r} is not under /Workspace; use a folder such as /Workspace/Shared/experiments")
        return value
