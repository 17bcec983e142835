"""What a Databricks AI Runtime target is configured with: the workspace, where uploads go, the run's
environment and MLflow experiment, and reserved capacity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import field_validator

from crosstrain import packaging, uploads
from crosstrain.backends._databricks import check_host, check_volume, check_workspace_dir
from crosstrain.records import JobState
from crosstrain.settings import TargetSettings, setting

#: `life_cycle_state` -> common state, for runs that have not ended (the Jobs states: an AI Runtime task is
#: one task of a one-time run). PENDING is also "waiting for GPUs", said in the task output's status_message.
STATE_MAP: Mapping[str, JobState] = {
    "QUEUED": JobState.QUEUED,
    "PENDING": JobState.QUEUED,
    "BLOCKED": JobState.QUEUED,
    "WAITING_FOR_RETRY": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "TERMINATING": JobState.RUNNING,
    "INTERNAL_ERROR": JobState.FAILED,
}
#: A run that ended (TERMINATED or SKIPPED) succeeded only with this `result_state`.
SUCCESS, CANCELED = "SUCCESS", "CANCELED"

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


class DatabricksAIRSettings(TargetSettings):
    host: str = setting(
        description="Workspace URL, e.g. https://dbc-1234.cloud.databricks.com.", env=("DATABRICKS_HOST",)
    )
    profile: str | None = setting(
        None,
        description="~/.databrickscfg profile for authentication (DATABRICKS_TOKEN and the other unified-auth "
        "variables are read by the Databricks SDK itself).",
        env=("DATABRICKS_CONFIG_PROFILE",),
    )
    workspace_dir: str = setting(
        "/Workspace/Shared/crosstrain",
        description="Workspace folder that submit uploads to: the code archive under code/<sha of the bundle>/, "
        "each run's command script under air/<identity>/<fingerprint>/.",
    )
    volume: str | None = setting(
        None,
        description="A Unity Catalog volume folder (/Volumes/<catalog>/<schema>/<volume>[/folder]) for the code "
        "archive, under code/<sha of the bundle>/: for archives over the workspace import's 10 MB.",
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

    # The checks are the classic Databricks target's (`crosstrain.backends._databricks`).
    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)

    @field_validator("workspace_dir")
    @classmethod
    def _workspace_dir(cls, value: str) -> str:
        return check_workspace_dir(value)

    @field_validator("volume")
    @classmethod
    def _volume(cls, value: str | None) -> str | None:
        return check_volume(value)

    @field_validator("experiment_directory")
    @classmethod
    def _experiment_directory(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/Workspace"):
            raise ValueError(f"{value!r} is not under /Workspace; use a folder such as /Workspace/Shared/experiments")
        return value
