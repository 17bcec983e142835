"""What an AI Platform Training target is configured with, and its pre-built PyTorch containers."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from crosstrain.backends._google import (
    StagingBucket,
)
from crosstrain.backends.binding import origin_of
from crosstrain.environments import Runtime, Runtimes
from crosstrain.records import JobState
from crosstrain.settings import TargetSettings, setting

if TYPE_CHECKING:
    pass


STATE_MAP = {
    "STATE_UNSPECIFIED": JobState.UNKNOWN,
    "QUEUED": JobState.QUEUED,
    "PREPARING": JobState.QUEUED,
    "RUNNING": JobState.RUNNING,
    "SUCCEEDED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "CANCELLING": JobState.CANCELLING,
    "CANCELLED": JobState.CANCELLED,
}

SHUTDOWN_NOTE = (
    "AI Platform Training was shut down on 2025-01-31; the same job file renders for Vertex AI with --target vertex"
)
#: The machine of a pool that names neither a machine type nor GPUs (the Vertex SDK's default too).
DEFAULT_MACHINE_TYPE = "n1-standard-4"
#: The API's documented minimum for `scheduling.maxWaitTime`.
MIN_MAX_WAIT_SECONDS = 1800
_JOB_ID_MAX = 128
_NETWORK = re.compile(r"projects/\d+/global/networks/[^/]+")
_BOOT_DISK_TYPES = ("pd-ssd", "pd-standard")
#: AI Platform Training's regions (https://cloud.google.com/ml-engine/docs/regions, "Available regions":
#: training). A region not listed is allowed, with a note.
REGIONS = (
    "us-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "europe-west1",
    "europe-west4",
    "asia-southeast1",
    "asia-east1",
    "asia-northeast1",
)
#: The Python crosstrain's bootstrap (`python -m crosstrain_code`, which runs a shipped job's command on every
#: node) needs: it is written for 3.7 (`from __future__ import annotations`).
BOOTSTRAP_PYTHON = "3.7"
_RUNTIME_VERSION = re.compile(r"(\d+)\.(\d+)")
#: A job in these states answers a cancel with 400: there is nothing left to cancel.
_ENDING = frozenset({JobState.CANCELLING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
# trainingInput keys for each crosstrain pool role: (machine type, replica count, replica config).
_POOL_FIELDS = {
    "primary": ("masterType", None, "masterConfig"),
    "workers": ("workerType", "workerCount", "workerConfig"),
    "parameter_servers": ("parameterServerType", "parameterServerCount", "parameterServerConfig"),
    "evaluators": ("evaluatorType", "evaluatorCount", "evaluatorConfig"),
}
#: Google's own API roots: where Google credentials may always go.
GOOGLE_ENDPOINTS = ("https://ml.googleapis.com", "https://ml.mtls.googleapis.com")
_JOBS_PATH = re.compile(r"/v1/projects/(?P<project>[^/]+)/jobs(?:/(?P<job>[^/:]+))?")


# ---- Pre-built PyTorch containers (masterConfig.imageUri of a package job) ------------------------------------
#: Source: https://cloud.google.com/ai-platform/training/docs/getting-started-pytorch and the ai-platform-samples
#: scripts (GoogleCloudPlatform/ai-platform-samples): `pytorch-{cpu,gpu}.1-N`, N from 4 to 10 seen.
#: The service is shut down and its list is gone: each entry below 1-10 is UNVERIFIED, as are the CPU flavours.
_AIP_IMAGE = "gcr.io/cloud-ml-public/training/pytorch-{flavour}.{version}"
_AIP_SOURCE = "https://cloud.google.com/ai-platform/training/docs/getting-started-pytorch"
RUNTIMES = Runtimes(
    "AI Platform Training",
    tuple(
        Runtime(
            f"1.{minor}",
            _AIP_IMAGE.format(flavour="gpu", version=f"1-{minor}"),
            _AIP_IMAGE.format(flavour="cpu", version=f"1-{minor}"),
            _AIP_SOURCE + ("" if minor == 10 else " (UNVERIFIED: seen in samples)"),
        )
        for minor in range(10, 3, -1)
    ),
    "targets.aiplatform.environment (an image URI) or targets.aiplatform.runtime_version",
)


def runtime_pythons(runtime_version: str) -> tuple[str, ...] | None:
    """The Pythons a runtime version runs, its default first; None where `runtime_version` is not MAJOR.MINOR.

    Source: `TrainingInput.pythonVersion` in the ml v1 discovery document ("Python '3.7' is available when
    runtime_version is set to '1.15' or later. Python '3.5' ... from '1.4' to '1.14'. Python '2.7' ... '1.15' or
    earlier") and the TensorFlow 2 page (runtime versions 2.1 and later run only Python 3.7). Up to 1.15 the
    default, with no pythonVersion, is 2.7.
    """
    match = _RUNTIME_VERSION.fullmatch(runtime_version)
    if match is None:
        return None
    version = (int(match[1]), int(match[2]))
    pythons: tuple[str, ...] = ("2.7",) if version <= (1, 15) else ()
    if (1, 4) <= version <= (1, 14):
        pythons += ("3.5",)
    if version >= (1, 15):
        pythons += ("3.7",)
    return pythons


class AIPlatformSettings(TargetSettings):
    project: str = setting(
        description="Google Cloud project id that owns the job.",
        env=("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"),
    )
    region: str = setting(
        "us-central1",
        description="Region the job runs in (trainingInput.region).",
        env=("CLOUD_ML_REGION", "GOOGLE_CLOUD_REGION"),
    )
    service_account: str | None = setting(
        None, description="Service account the job runs as; overrides the job's `identity`."
    )
    network: str | None = setting(
        None, description="projects/{number}/global/networks/{name} the job peers with; overrides the job's `network`."
    )
    job_dir: str | None = setting(
        None, description="gs:// path passed to the program as --job-dir; overrides the job's `output_dir`."
    )
    priority: int | None = Field(
        None, ge=0, le=1000, description="Scheduling priority among jobs that want the same accelerators (0-1000)."
    )
    staging_bucket: StagingBucket = setting(
        None,
        description="gs://BUCKET[/PREFIX] the job's `code` is uploaded to (as one content-addressed sdist).",
        env=("CROSSTRAIN_STAGING_BUCKET",),
    )
    environment: str | None = setting(
        None, description="A pre-built container image to run the job's code on; overrides the job's `environment`."
    )
    runtime_version: str | None = setting(
        None,
        description="An AI Platform runtime version to run the job's code on instead of a container "
        "(trainingInput.runtimeVersion; the runtimes hold TensorFlow, scikit-learn and XGBoost, not PyTorch).",
    )
    python_version: str | None = setting(None, description="The runtime's Python version, e.g. 3.7.")
    endpoint: str = setting(
        "https://ml.googleapis.com",
        description="API root (https://ml.mtls.googleapis.com for mTLS).",
        env=("CROSSTRAIN_AIPLATFORM_ENDPOINT",),
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        # Google credentials go to this host: it must be a plain http(s) URL.
        if origin_of(value) is None:
            raise ValueError("the endpoint is not an http(s) URL; use one such as https://ml.googleapis.com")
        return value


def job_id(identity: str) -> str:
    """The jobId for an identity: letters, digits and underscores, starting with a letter, at most 128.

    Deterministic, so a retried or repeated create names the same job and meets 409 instead of making another.
    """
    text = re.sub(r"[^A-Za-z0-9_]", "_", identity)
    if not text[:1].isalpha():
        text = f"j_{text}"
    return text[:_JOB_ID_MAX]
